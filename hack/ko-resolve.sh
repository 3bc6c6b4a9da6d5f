#!/usr/bin/env bash
# Proves that every ko:// image in config/ builds, offline: `ko resolve`
# against a registry on 127.0.0.1 (`crane registry serve`, in memory) with a
# base image made here (one tiny layer holding /etc/passwd for the nonroot
# user, user 65532), so that neither the network nor the real base image
# (ko.yaml) is needed. Prints the resolved manifests' image references and
# checks each image's binary, user and platform.
#
#   hack/ko-resolve.sh                 # config/, config/dispatch/, config/standalone/
#   hack/ko-resolve.sh config/         # or the folders given
set -o errexit -o nounset -o pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"
platform="${KO_PLATFORM:-linux/$(go env GOARCH)}"
(( $# )) || set -- config/ config/dispatch/ config/standalone/

# ko and crane from their own pinned module (hack/tools/ko), built once.
bin="$(hack/build-tools.sh)"

work="$(mktemp -d)"
# shellcheck source=hack/registry.sh
source hack/registry.sh
cleanup() {
  # Keep the script's own status: the registry's (143 after our SIGTERM)
  # must not become it.
  local rc=$?
  stop_registry
  rm -rf "${work}"
  exit "${rc}"
}
trap cleanup EXIT
start_registry "${work}"

# A minimal static base: what distroless static:nonroot offers a Go binary
# that needs no libc (a passwd entry for 65532), with the platform set so
# that ko accepts it for ${platform}.
mkdir -p "${work}/rootfs/etc"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"${work}/rootfs/etc/passwd"
tar -C "${work}/rootfs" --owner=0 --group=0 -cf "${work}/base.tar" etc
"${bin}/crane" append --new_layer "${work}/base.tar" --new_tag "${reg}/base:layer" >/dev/null
# An image index, as distroless's is: its one layer holds no code, so the
# same layer serves linux/amd64 and linux/arm64.
for p in linux/amd64 linux/arm64; do
  "${bin}/crane" mutate "${reg}/base:layer" --user 65532 --set-platform "${p}" --tag "${reg}/base:${p#*/}" >/dev/null
done
"${bin}/crane" index append -m "${reg}/base:amd64" -m "${reg}/base:arm64" -t "${reg}/base:static" >/dev/null
base="${reg}/base:static@$("${bin}/crane" digest "${reg}/base:static")"
echo "base image ${base} (linux/amd64, linux/arm64)" >&2

# -B: repo paths are the binaries' base names; --platform: one platform is
# enough to prove the build (ko.yaml lists the real ones).
args=()
for f in "$@"; do args+=(-f "${f}"); done
KO_DOCKER_REPO="${reg}/istio-aux" KO_DEFAULTBASEIMAGE="${base}" \
  "${bin}/ko" resolve --platform="${platform}" -B "${args[@]}" >"${work}/resolved.yaml"

if grep -n 'ko://' "${work}/resolved.yaml"; then
  echo "unresolved ko:// references above" >&2
  exit 1
fi
images="$(sed -n 's/^ *image: *//p' "${work}/resolved.yaml" | sort -u)"
[[ -n "${images}" ]] || { echo "no images in the resolved manifests" >&2; exit 1; }
for image in ${images}; do
  [[ "${image}" == "${reg}/"*@sha256:* ]] || { echo "not built here: ${image}" >&2; exit 1; }
  config="$("${bin}/crane" config "${image}")"
  user="$(sed -n 's/.*"User":"\([^"]*\)".*/\1/p' <<<"${config}")"
  entry="$(sed -n 's/.*"Entrypoint":\["\([^"]*\)".*/\1/p' <<<"${config}")"
  [[ "${user}" == 65532 ]] || { echo "${image}: user '${user}', want 65532 (runAsNonRoot)" >&2; exit 1; }
  # The binary must really be in the image, at the entrypoint.
  "${bin}/crane" export "${image}" "${work}/fs.tar"
  tar -tf "${work}/fs.tar" 2>/dev/null | sed 's#^\./##; s#^/##' >"${work}/files"
  grep -qx "${entry#/}" "${work}/files" \
    || { echo "${image}: entrypoint ${entry} not in the image" >&2; exit 1; }
  # Stripped (defaultLdflags -s -w): the witness that ko read .ko.yaml, as
  # the base image and platform above are overridden on the command line.
  tar -xf "${work}/fs.tar" -C "${work}" "${entry#/}" 2>/dev/null || tar -xf "${work}/fs.tar" -C "${work}" "${entry}"
  if go tool nm "${work}/${entry#/}" >/dev/null 2>&1; then
    echo "${image}: binary has a symbol table: ko did not read .ko.yaml" >&2
    exit 1
  fi
  echo "ok ${image} (entrypoint ${entry}, user ${user}, stripped)"
done

# make release, against the same registry, as a release is made (every
# platform): the YAML pins every image by a digest the registry serves,
# tagged with the version, each an index of linux/amd64 and linux/arm64,
# and the checksums hold.
version=v0.0.0-verify
VERSION="${version}" KO_DOCKER_REPO="${reg}/release" KO_DEFAULTBASEIMAGE="${base}" \
  RELEASE_DIR="${work}/release" hack/release.sh
(cd "${work}/release" && sha256sum --quiet -c checksums.txt)
for f in istio-aux.yaml istio-aux-standalone.yaml; do
  if grep -n 'ko://' "${work}/release/${f}"; then
    echo "release ${f}: unresolved ko:// references above" >&2
    exit 1
  fi
  for image in $(sed -n 's/^ *image: *//p' "${work}/release/${f}" | sort -u); do
    [[ "${image}" == "${reg}/release/"*":${version}@sha256:"* ]] || { echo "release ${f}: ${image} is not pinned and tagged" >&2; exit 1; }
    got="$("${bin}/crane" digest "${image%@*}")"
    [[ "${got}" == "${image##*@}" ]] || { echo "release ${f}: ${image%@*} is ${got} in the registry" >&2; exit 1; }
    platforms="$("${bin}/crane" manifest "${image}" | go run ./hack/release/platforms)" ||
      { echo "release ${f}: ${image}: not an image index" >&2; exit 1; }
    [[ "${platforms}" == "linux/amd64 linux/arm64" ]] ||
      { echo "release ${f}: ${image} holds '${platforms}', want linux/amd64 linux/arm64" >&2; exit 1; }
    echo "ok release ${image} (index: ${platforms})"
  done
done
mapfile -t refs < <(sed -n 's/^ *image: *//p' "${work}/release/istio-aux.yaml" "${work}/release/istio-aux-standalone.yaml" | sort -u)
commit="$(git rev-parse HEAD)"
"${work}/release/kubectl-istio_aux" --help >/dev/null

# The arm64 builds run, under emulation (qemu-user, which hack/node-deps.sh
# installs; no binfmt: qemu-aarch64 is called by name): each image's
# binary, taken out of the image as a node would pull it, answers --help or
# refuses the empty configuration in its own words, and the plugin prints
# its version.
if command -v qemu-aarch64 >/dev/null; then
  arm() {
    local image="$1" want="$2" entry out
    entry="$("${bin}/crane" config --platform linux/arm64 "${image}" | sed -n 's/.*"Entrypoint":\["\([^"]*\)".*/\1/p')"
    mkdir -p "${work}/arm64"
    "${bin}/crane" export --platform linux/arm64 "${image}" "${work}/arm64.tar"
    tar -xf "${work}/arm64.tar" -C "${work}/arm64" "${entry#/}" 2>/dev/null || tar -xf "${work}/arm64.tar" -C "${work}/arm64" "${entry}"
    out="$(timeout 60 qemu-aarch64 "${work}/arm64/${entry#/}" --help 2>&1 || true)"
    grep -q -- "${want}" <<<"${out}" || { echo "arm64 ${image}: want '${want}', got: ${out}" >&2; exit 1; }
    echo "ok arm64 under qemu-aarch64: ${entry##*/} (${want})"
  }
  for image in "${refs[@]}"; do
    case "${image}" in
      # ko names github.com/nats-io/nats-server/v2's image v2 (-B).
      */v2:*) arm "${image}" "Usage: nats-server" ;;
      */natstoken:*) arm "${image}" "Usage of" ;;
      */webhook:*) arm "${image}" "WEBHOOK_NAME" ;;
      *) arm "${image}" "Invalid configuration" ;;
    esac
  done
  tar -xzf "${work}/release/kubectl-istio_aux_linux_arm64.tar.gz" -C "${work}/arm64" kubectl-istio_aux
  qemu-aarch64 "${work}/arm64/kubectl-istio_aux" version --client | grep -q "${version}" ||
    { echo "arm64 plugin: version --client does not print ${version}" >&2; exit 1; }
  echo "ok arm64 under qemu-aarch64: kubectl-istio_aux version --client"
elif [[ "${CI:-}" == true ]]; then
  echo "qemu-aarch64 is missing (hack/node-deps.sh installs qemu-user): the arm64 builds cannot be run" >&2
  exit 1
else
  echo "skip: no qemu-aarch64 (hack/node-deps.sh installs qemu-user): the arm64 builds were not run" >&2
fi

# The krew manifest, with krew's own validation and installer
# (hack/tools/krew), from the release's archives; kubectl is the newest
# Kubernetes's (hack/build-k8s.sh; make e2e has built it by now).
kubectl="$(K8S_COMMANDS=kubectl hack/build-k8s.sh)/kubectl"
(cd hack/tools/krew && RELEASE_DIR="${work}/release" KUBECTL="${kubectl}" go test -count=1 -v -run TestReleaseKrewManifest ./)
# The Helm chart, packaged with these images (hack/chart's TestReleaseChart
# renders such an archive against the release's YAML).
grep -q " istio-aux-${version#v}.tgz$" "${work}/release/checksums.txt" || { echo "release: no Helm chart istio-aux-${version#v}.tgz in checksums.txt" >&2; exit 1; }
tar -xzOf "${work}/release/istio-aux-${version#v}.tgz" istio-aux/values.yaml | grep -q "webhook: ${reg}/release/webhook:${version}@sha256:" ||
  { echo "release: the chart's values do not pin the release's webhook image" >&2; exit 1; }
echo "ok release chart istio-aux-${version#v}.tgz"

# The signatures, with cosign's own verification code (hack/tools/sign
# verify, cosign's pkg/cosign) and the release's public key: every image's
# signature, its SPDX SBOM and its SLSA provenance naming this commit, and
# checksums.txt against checksums.txt.sig. Then a tag moved to other bytes
# must fail to verify.
"${bin}/sign" verify -key "${work}/release/cosign.pub" -commit "${commit}" \
  -blob "${work}/release/checksums.txt" "${refs[@]}"
# The chart, pushed as Helm pushes it (oci://REPO/charts/istio-aux:X.Y.Z):
# signed, with its provenance (a chart has no SBOM).
chart_ref="$(cat "${work}/release/chart-ref.txt")"
[[ "${chart_ref}" == "${reg}/release/charts/istio-aux:${version#v}@sha256:"* ]] ||
  { echo "release: the chart was pushed as '${chart_ref}'" >&2; exit 1; }
"${bin}/sign" verify -sbom=false -key "${work}/release/cosign.pub" -commit "${commit}" "${chart_ref}"
"${bin}/crane" copy "${base}" "${refs[0]%@*}" >/dev/null 2>&1
if "${bin}/sign" verify -key "${work}/release/cosign.pub" -commit "${commit}" "${refs[0]}" 2>"${work}/tampered.log"; then
  echo "release: ${refs[0]%@*} moved to other bytes, and it still verified" >&2
  exit 1
fi
echo "ok release: ${refs[0]%@*} moved to other bytes fails to verify: $(tail -c 200 "${work}/tampered.log")"

