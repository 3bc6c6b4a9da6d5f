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
registry_pid=""
cleanup() {
  # Keep the script's own status: the registry's (143 after our SIGTERM)
  # must not become it.
  local rc=$?
  if [[ -n "${registry_pid}" ]]; then
    kill "${registry_pid}" 2>/dev/null || true
    wait "${registry_pid}" 2>/dev/null || true
  fi
  rm -rf "${work}"
  exit "${rc}"
}
trap cleanup EXIT

# The registry picks a free port and logs it.
"${bin}/crane" registry serve --address 127.0.0.1:0 >"${work}/registry.log" 2>&1 &
registry_pid=$!
port=""
for _ in $(seq 100); do
  port="$(sed -n 's/.*serving on port \([0-9]*\).*/\1/p' "${work}/registry.log")"
  [[ -n "${port}" ]] && break
  kill -0 "${registry_pid}" 2>/dev/null || { cat "${work}/registry.log" >&2; exit 1; }
  sleep 0.1
done
[[ -n "${port}" ]] || { echo "registry did not start" >&2; cat "${work}/registry.log" >&2; exit 1; }
reg="127.0.0.1:${port}"

# A minimal static base: what distroless static:nonroot offers a Go binary
# that needs no libc (a passwd entry for 65532), with the platform set so
# that ko accepts it for ${platform}.
mkdir -p "${work}/rootfs/etc"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"${work}/rootfs/etc/passwd"
tar -C "${work}/rootfs" --owner=0 --group=0 -cf "${work}/base.tar" etc
"${bin}/crane" append --new_layer "${work}/base.tar" --new_tag "${reg}/base:layer" >/dev/null
base="$("${bin}/crane" mutate "${reg}/base:layer" --user 65532 --set-platform "${platform}" --tag "${reg}/base:static")"
echo "base image ${base}" >&2

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

# make release, against the same registry: the YAML pins every image by a
# digest the registry serves, tagged with the version, and the checksums hold.
version=v0.0.0-verify
VERSION="${version}" KO_DOCKER_REPO="${reg}/release" KO_DEFAULTBASEIMAGE="${base}" RELEASE_PLATFORM="${platform}" \
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
    echo "ok release ${image}"
  done
done
"${work}/release/kubectl-istio_aux" --help >/dev/null
# The Helm chart, packaged with these images (hack/chart's TestReleaseChart
# renders such an archive against the release's YAML).
grep -q " istio-aux-${version#v}.tgz$" "${work}/release/checksums.txt" || { echo "release: no Helm chart istio-aux-${version#v}.tgz in checksums.txt" >&2; exit 1; }
tar -xzOf "${work}/release/istio-aux-${version#v}.tgz" istio-aux/values.yaml | grep -q "webhook: ${reg}/release/webhook:${version}@sha256:" ||
  { echo "release: the chart's values do not pin the release's webhook image" >&2; exit 1; }
echo "ok release chart istio-aux-${version#v}.tgz"
