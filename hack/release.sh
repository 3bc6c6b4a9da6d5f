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
#                              for registries the cluster pulls from
#   kubectl-istio_aux          the kubectl plugin (linux, RELEASE_PLATFORM's arch)
#   istio-aux-X.Y.Z.tgz        the Helm chart (charts/istio-aux) with these
#                              images, when both config and standalone are made
#   checksums.txt              SHA-256 of the files above
#
# The images are pushed to KO_DOCKER_REPO from those layouts with crane,
# byte for byte, unless RELEASE_PUSH=0 (then push them yourself: README).
# RELEASE_SHAPES picks the manifests (default "config standalone openshift");
# RELEASE_PLATFORM the one platform (default linux/amd64).
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
platform="${RELEASE_PLATFORM:-linux/amd64}"
shapes="${RELEASE_SHAPES:-config standalone openshift}"
bin="$(hack/build-tools.sh)"

# ko names the layout's images after its path, which must read as a
# repository (lower case): no mktemp, whose names mix cases.
work="${TMPDIR:-/tmp}/istio-aux-release-$$-${RANDOM}"
mkdir -m 0700 "${work}"
trap 'rm -rf "${work}"' EXIT
rm -rf "${out}"
mkdir -p "${out}"

# ko resolve (no SBOM: nothing here would carry it): the images into one OCI layout (exact bytes: the pinned digests
# are theirs) and a throwaway tarball, whose publisher is what writes the
# references as REPO/NAME:VERSION@sha256:DIGEST. Nothing is pushed here.
resolve() {
  local file="$1"; shift
  local args=()
  for f in "$@"; do args+=(-f "$f"); done
  "${bin}/ko" resolve --push=false --sbom=none --base-import-paths --tags "${version}" --platform "${platform}" \
    --oci-layout-path "${work}/layout" --tarball "${work}/${file}.tar" "${args[@]}" > "${out}/${file}"
  rm -f "${work}/${file}.tar"
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

GOOS="${platform%/*}" GOARCH="${platform#*/}" go build -o "${out}/kubectl-istio_aux" ./cmd/kubectl-istio_aux

# The Helm chart (charts/istio-aux, generated from config/) with the images
# these manifests pin, as istio-aux-VERSION.tgz: it needs the images of
# both shapes, so only a release of both has it.
chart=()
if [[ -f "${out}/istio-aux.yaml" && -f "${out}/istio-aux-standalone.yaml" ]]; then
  chart=("$(basename "$(go run ./hack/chart -release "${version}" -package "${out}" "${out}/istio-aux.yaml" "${out}/istio-aux-standalone.yaml")")")
fi

if [[ "${RELEASE_PUSH:-1}" != 0 ]]; then
  while read -r name digest; do
    got="$("${bin}/crane" push ${CRANE_FLAGS:-} "${work}/images/${name}" "${repo}/${name}:${version}")"
    if [[ "${got##*@}" != "${digest}" ]]; then
      echo "release: ${name} pushed as ${got}, but the manifests pin ${digest}" >&2
      exit 1
    fi
  done < "${work}/images.txt"
fi

(cd "${out}" && sha256sum -- *.yaml images.tar kubectl-istio_aux "${chart[@]}" > checksums.txt)
echo "release ${version} in ${out}:" >&2
sed 's/^/  /' "${work}/images.txt" >&2
