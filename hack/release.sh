#!/usr/bin/env bash
# make release VERSION=vX.Y.Z: istio-aux as users install it without ko.
#
#   KO_DOCKER_REPO=registry.example.com/istio-aux make release VERSION=v0.1.0
#
# writes _output/release/<VERSION>/ (RELEASE_DIR overrides it):
#   istio-aux.yaml             config/ and config/nats/, every image pinned by
#                              digest and tagged VERSION (ko resolve, as
#                              Knative's releases are made)
#   istio-aux-standalone.yaml  config/standalone/, the same way
#   istio-aux-openshift.yaml   istio-aux.yaml with no pinned user, group or
#                              fsGroup (hack/release/unpin): for OpenShift,
#                              whose SCC gives them from the namespace's range
#   images.tar                 every image, an OCI layout each (images/<name>),
#                              for registries the cluster pulls from; each an
#                              image index of RELEASE_PLATFORM's platforms
#   sbom/                      each image's SPDX SBOM, as ko writes it (per
#                              platform, and the index's)
#   kubectl-istio_aux          the kubectl plugin, linux on the first
#                              platform's architecture
#   kubectl-istio_aux_OS_ARCH.tar.gz
#                              the plugin with LICENSE, for each of
#                              RELEASE_PLUGIN_PLATFORMS
#   krew/istio-aux.yaml        the krew plugin manifest for those archives
#                              (downloaded from RELEASE_URL)
#   istio-aux-X.Y.Z.tgz        the Helm chart (charts/istio-aux) with these
#                              images, when both config and standalone are
#                              made; pushed (unless RELEASE_PUSH=0) to
#                              oci://KO_DOCKER_REPO/charts as helm push does,
#                              and signed there
#   third-party-licenses.csv   every package the images and the plugin link
#                              that is not istio-aux's, its version and
#                              licence (go-licenses, licenseclassifier)
#   third-party-licenses.tar.gz
#                              the licence texts (and what a licence asks to
#                              ship beside them), as go-licenses save keeps them
#   cosign.pub                 the public half of the key that signed the
#                              release
#   checksums.txt              SHA-256 of the files above
#   checksums.txt.sig          its signature (cosign sign-blob's form)
#
# Every image pushed is signed with that key, cosign's way (the .sig tag),
# with two attestations (the .att tag): its SBOM and a SLSA v1 provenance
# naming the commit and this command. RELEASE_SIGNING_KEY names the private
# key (cosign.key; COSIGN_PASSWORD decrypts it); without it one is made
# once in _output/release-key/ and kept there. docs/install.md shows how
# to verify.
#
# The images are pushed to KO_DOCKER_REPO from those layouts with crane,
# byte for byte, unless RELEASE_PUSH=0 (then push them yourself: README).
# RELEASE_SHAPES picks the manifests (default "config standalone openshift");
# RELEASE_PLATFORM the images' platforms, comma-separated (default
# linux/amd64,linux/arm64); RELEASE_PLUGIN_PLATFORMS the plugin's
# (default linux, darwin and windows on amd64 and arm64).
set -o errexit -o nounset -o pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"
version="${VERSION:-}"
if [[ ! "${version}" =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]]; then
  echo "release: VERSION=${version:-(unset)}: want vMAJOR.MINOR.PATCH, e.g. make release VERSION=v0.1.0" >&2
  exit 2
fi
repo="${KO_DOCKER_REPO:-}"
if [[ -z "${repo}" ]]; then
  echo "release: KO_DOCKER_REPO is unset: the registry your nodes pull from, e.g. registry.example.com/istio-aux" >&2
  exit 2
fi
out="${RELEASE_DIR:-${root}/_output/release/${version}}"
platforms="${RELEASE_PLATFORM:-linux/amd64,linux/arm64}"
plugin_platforms="${RELEASE_PLUGIN_PLATFORMS:-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64 windows/arm64}"
release_url="${RELEASE_URL:-https://github.com/istio-aux/istio-aux/releases/download/${version}}"
shapes="${RELEASE_SHAPES:-config standalone openshift}"
bin="$(hack/build-tools.sh)"
# sign reads the key's passphrase from it, as cosign does; unset is empty.
export COSIGN_PASSWORD="${COSIGN_PASSWORD:-}"

# ko names the layout's images after its path, which must read as a
# repository (lower case): no mktemp, whose names mix cases.
work="${TMPDIR:-/tmp}/istio-aux-release-$$-${RANDOM}"
mkdir -m 0700 "${work}"
# shellcheck source=hack/registry.sh
source hack/registry.sh
trap 'stop_registry; rm -rf "${work}"' EXIT
# ko pushes each build to a registry of its own, in memory, on 127.0.0.1:
# an image index cannot go to the tarball publisher, and the registry's
# references (REPO/NAME:VERSION@sha256:DIGEST) are what the manifests pin,
# with the registry's address made KO_DOCKER_REPO's. The layout beside it
# keeps the exact bytes, so the digests pinned are the ones pushed.
start_registry "${work}"
rm -rf "${out}"
mkdir -p "${out}"

# ko resolve: the images into one OCI layout (exact bytes: the pinned
# digests are theirs) and the staging registry; their SPDX SBOMs into sbom/.
resolve() {
  local file="$1"; shift
  local args=()
  for f in "$@"; do args+=(-f "$f"); done
  KO_DOCKER_REPO="${reg}/stage" "${bin}/ko" resolve --sbom=spdx --sbom-dir "${out}/sbom" --base-import-paths \
    --tags "${version}" --platform "${platforms}" --oci-layout-path "${work}/layout" "${args[@]}" >"${work}/${file}"
  sed "s#${reg}/stage/#${repo}/#g" "${work}/${file}" >"${out}/${file}"
}
manifests=()
for shape in ${shapes}; do
  case "${shape}" in
    config) resolve istio-aux.yaml config/ config/nats/; manifests+=("${out}/istio-aux.yaml") ;;
    standalone) resolve istio-aux-standalone.yaml config/standalone/; manifests+=("${out}/istio-aux-standalone.yaml") ;;
    openshift)
      [[ -f "${out}/istio-aux.yaml" ]] || resolve istio-aux.yaml config/ config/nats/
      go run ./hack/release/unpin <"${out}/istio-aux.yaml" >"${out}/istio-aux-openshift.yaml"
      [[ " ${shapes} " == *" config "* ]] || rm -f "${out}/istio-aux.yaml"
      manifests+=("${out}/istio-aux-openshift.yaml") ;;
    *) echo "release: RELEASE_SHAPES: unknown shape ${shape} (config, standalone, openshift)" >&2; exit 2 ;;
  esac
done

# One layout per image, sharing their blobs: what `crane push` takes.
go run ./hack/release -layout "${work}/layout" -out "${work}/images" -version "${version}" "${manifests[@]}" > "${work}/images.txt"
tar -C "${work}" -cf "${out}/images.tar" images

# The plugin: bare for linux on the first platform's architecture, and an
# archive with the licence for each plugin platform (krew's unit), listed
# in the krew manifest with its SHA-256.
first="${platforms%%,*}"
stamp="-X github.com/istio-aux/istio-aux/internal/version.release=${version}"
archives=()
for p in ${plugin_platforms}; do
  goos="${p%/*}" goarch="${p#*/}" exe=kubectl-istio_aux
  [[ "${goos}" == windows ]] && exe+=.exe
  dir="${work}/plugin/${goos}_${goarch}"
  mkdir -p "${dir}"
  GOOS="${goos}" GOARCH="${goarch}" go build -ldflags "${stamp}" -o "${dir}/${exe}" ./cmd/kubectl-istio_aux
  cp LICENSE "${dir}/LICENSE"
  # tar.gz on every OS: krew unpacks it on windows as well.
  archive="kubectl-istio_aux_${goos}_${goarch}.tar.gz"
  tar -C "${dir}" --owner=0 --group=0 --mtime=@0 --sort=name -czf "${out}/${archive}" LICENSE "${exe}"
  archives+=("${archive}")
done
bare="${work}/plugin/linux_${first#*/}/kubectl-istio_aux"
if [[ ! -x "${bare}" ]]; then
  mkdir -p "$(dirname "${bare}")"
  GOOS=linux GOARCH="${first#*/}" go build -ldflags "${stamp}" -o "${bare}" ./cmd/kubectl-istio_aux
fi
cp "${bare}" "${out}/kubectl-istio_aux"
mkdir -p "${out}/krew"
go run ./hack/release/krew -version "${version}" -url "${release_url}" -dir "${out}" "${archives[@]}" >"${out}/krew/istio-aux.yaml"

# The third-party licences of every binary the images and the plugin hold:
# go-licenses classifies each package's licence file (licenseclassifier)
# and keeps the texts. Its search for each licence's web address fails
# offline for vanity import paths (its warnings go to the log); the
# licence itself is read from the module, not from the web. It tells the
# standard library by the GOROOT it was built with, which a -trimpath build
# (make's GOFLAGS) does not record: without GOROOT in its environment every
# package reads as the standard library and the report comes out empty.
export GOROOT
GOROOT="$(go env GOROOT)"
mapfile -t binaries < <(grep -rhoE 'ko://[^ "]+' config | sed 's#^ko://##' | sort -u)
binaries+=(./cmd/kubectl-istio_aux)
"${bin}/go-licenses" report --ignore github.com/istio-aux/istio-aux --template hack/release/licenses.csv.tpl \
  "${binaries[@]}" >"${out}/third-party-licenses.csv" 2>"${work}/licenses.log" ||
  { cat "${work}/licenses.log" >&2; exit 1; }
for module in k8s.io/client-go github.com/nats-io/nats.go github.com/cloudevents/sdk-go/v2 knative.dev/pkg; do
  if ! grep -q "^${module}," "${out}/third-party-licenses.csv"; then
    echo "release: third-party-licenses.csv does not name ${module}, which every image links; go-licenses' log:" >&2
    cat "${work}/licenses.log" >&2
    exit 1
  fi
done
if grep -q ',Unknown,' "${out}/third-party-licenses.csv"; then
  echo "release: a package with no licence go-licenses could read:" >&2
  grep ',Unknown,' "${out}/third-party-licenses.csv" >&2
  exit 1
fi
"${bin}/go-licenses" save --ignore github.com/istio-aux/istio-aux --save_path "${work}/third-party-licenses" \
  "${binaries[@]}" 2>>"${work}/licenses.log" || { cat "${work}/licenses.log" >&2; exit 1; }
tar -C "${work}" --owner=0 --group=0 --sort=name -czf "${out}/third-party-licenses.tar.gz" third-party-licenses

# The Helm chart (charts/istio-aux, generated from config/) with the images
# these manifests pin, as istio-aux-VERSION.tgz: it needs the images of
# both shapes, so only a release of both has it.
chart=()
chart_ref=""
if [[ -f "${out}/istio-aux.yaml" && -f "${out}/istio-aux-standalone.yaml" ]]; then
  push=()
  [[ "${RELEASE_PUSH:-1}" != 0 ]] && push=(-push "oci://${repo}/charts")
  mapfile -t made < <(go run ./hack/chart -release "${version}" -package "${out}" "${push[@]}" "${out}/istio-aux.yaml" "${out}/istio-aux-standalone.yaml")
  chart=("$(basename "${made[0]}")")
  chart_ref="${made[1]:-}"
fi

key="${RELEASE_SIGNING_KEY:-}"
if [[ -z "${key}" ]]; then
  key="${root}/_output/release-key/cosign.key"
  if [[ ! -f "${key}" ]]; then
    mkdir -p "$(dirname "${key}")"
    "${bin}/sign" keygen -dir "$(dirname "${key}")"
    echo "release: made a signing key ${key} (RELEASE_SIGNING_KEY names yours)" >&2
  fi
fi
pub="${key%.key}.pub"
[[ -f "${pub}" ]] || { echo "release: ${pub}: the public half of ${key} must be beside it" >&2; exit 2; }
cp "${pub}" "${out}/cosign.pub"

if [[ "${RELEASE_PUSH:-1}" != 0 ]]; then
  refs=()
  while read -r name digest; do
    got="$("${bin}/crane" push ${CRANE_FLAGS:-} "${work}/images/${name}" "${repo}/${name}:${version}")"
    if [[ "${got##*@}" != "${digest}" ]]; then
      echo "release: ${name} pushed as ${got}, but the manifests pin ${digest}" >&2
      exit 1
    fi
    refs+=("${repo}/${name}:${version}@${digest}")
  done < "${work}/images.txt"
  commit="$(git -C "${root}" rev-parse HEAD 2>/dev/null || echo unknown)"
  "${bin}/sign" images -key "${key}" -sbom "${out}/sbom" -commit "${commit}" \
    -command "make release VERSION=${version}" "${refs[@]}"
  if [[ -n "${chart_ref}" ]]; then
    "${bin}/sign" images -key "${key}" -commit "${commit}" \
      -command "make release VERSION=${version}" "${chart_ref}"
    echo "${chart_ref}" >"${out}/chart-ref.txt"
  fi
fi

(cd "${out}" && sha256sum -- *.yaml images.tar kubectl-istio_aux "${archives[@]}" krew/istio-aux.yaml sbom/*.json \
  third-party-licenses.csv third-party-licenses.tar.gz cosign.pub "${chart[@]}" \
  $([[ -f "${out}/chart-ref.txt" ]] && echo chart-ref.txt) > checksums.txt)
"${bin}/sign" blob -key "${key}" "${out}/checksums.txt"
echo "release ${version} in ${out}:" >&2
sed 's/^/  /' "${work}/images.txt" >&2
