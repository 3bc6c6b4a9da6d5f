#!/usr/bin/env bash
# Builds Istio's pilot-agent and pilot-discovery (istiod) from the Go module
# proxy (no Docker, no release downloads) into a cache keyed by version, and
# copies next to them what test/istio reads at run time from the same module
# version: the injection templates and default values of the istio-discovery
# chart, and the Envoy bootstrap template pilot-agent renders. Nothing of
# Istio's is committed here. A file that is already there is not rebuilt.
# Prints the bin directory.
set -o errexit -o nounset -o pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools="${root}/hack/tools/istio"
# The one version hack/tools/istio/go.mod requires (test/istio knows it too).
ISTIO_VERSION="$(cd "${tools}" && go list -m -f '{{.Version}}' istio.io/istio)"
dir="${ISTIO_AUX_CACHE:-${root}/_output}/istio-${ISTIO_VERSION}"
bin="${dir}/bin"
mkdir -p "${bin}"

cd "${tools}"
for cmd in pilot-agent pilot-discovery; do
  [[ -x "${bin}/${cmd}" ]] && continue
  start=${SECONDS}
  echo "building ${cmd} ${ISTIO_VERSION} ..." >&2
  # Istio's own builds are static too: the proxy image is distroless.
  GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" \
    -o "${bin}/${cmd}.tmp" "istio.io/istio/pilot/cmd/${cmd}"
  mv "${bin}/${cmd}.tmp" "${bin}/${cmd}"
  echo "built ${cmd} in $((SECONDS - start))s" >&2
done

# The chart files and the bootstrap template, from the module cache.
chart="${dir}/istio-discovery"
if [[ ! -f "${dir}/envoy_bootstrap.json" || ! -f "${chart}/values.yaml" ]]; then
  src="$(GOFLAGS=-mod=mod go mod download -json "istio.io/istio@${ISTIO_VERSION}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  [[ -n "${src}" ]] || { echo "istio.io/istio@${ISTIO_VERSION} not in the module cache" >&2; exit 1; }
  mkdir -p "${chart}/files"
  cp "${src}/manifests/charts/istio-control/istio-discovery/files/"* "${chart}/files/"
  cp "${src}/manifests/charts/istio-control/istio-discovery/values.yaml" "${chart}/"
  cp "${src}/tools/packaging/common/envoy_bootstrap.json" "${dir}/envoy_bootstrap.json.tmp"
  chmod -R u+w "${chart}" "${dir}/envoy_bootstrap.json.tmp"
  mv "${dir}/envoy_bootstrap.json.tmp" "${dir}/envoy_bootstrap.json"
fi
echo "${bin}"
