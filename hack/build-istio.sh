#!/usr/bin/env bash
# Builds Istio's pilot-agent and pilot-discovery (istiod) from the Go module
# proxy (no Docker, no release downloads) into a cache keyed by version, and
# copies next to them what test/istio reads at run time from the same module
# version: the injection templates and default values of the istio-discovery
# chart, and the Envoy bootstrap template pilot-agent renders. Nothing of
# Istio's is committed here. A file that is already there is not rebuilt.
# hack/build-istio.sh [MODFILE...]: each a module file of hack/tools/istio
# (go.mod, the default, master after the 1.30 cut; v1.24.mod, v1.26.mod,
# v1.29.mod: those releases' commits; test/istio's Releases). Prints the bin
# directory of each.
set -o errexit -o nounset -o pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools="${root}/hack/tools/istio"
cd "${tools}"
modfiles=("$@")
((${#modfiles[@]})) || modfiles=(go.mod)

for modfile in "${modfiles[@]}"; do
  # The one version the module file requires (test/istio knows it too).
  ISTIO_VERSION="$(go list -modfile="${modfile}" -m -f '{{.Version}}' istio.io/istio)"
  dir="${ISTIO_AUX_CACHE:-${root}/_output}/istio-${ISTIO_VERSION}"
  bin="${dir}/bin"
  mkdir -p "${bin}"
  for cmd in pilot-agent pilot-discovery; do
    [[ -x "${bin}/${cmd}" ]] && continue
    start=${SECONDS}
    echo "building ${cmd} ${ISTIO_VERSION} (${modfile}) ..." >&2
    # Istio's own builds are static too: the proxy image is distroless.
    GOFLAGS=-mod=mod CGO_ENABLED=0 go build -modfile="${modfile}" -trimpath -ldflags "-s -w" \
      -o "${bin}/${cmd}.tmp" "istio.io/istio/pilot/cmd/${cmd}"
    mv "${bin}/${cmd}.tmp" "${bin}/${cmd}"
    echo "built ${cmd} in $((SECONDS - start))s" >&2
  done

  # The chart files and the bootstrap template, from the module cache.
  chart="${dir}/istio-discovery"
  if [[ ! -f "${dir}/envoy_bootstrap.json" || ! -f "${chart}/values.yaml" ]]; then
    src="$(GOFLAGS=-mod=mod go mod download -modfile="${modfile}" -json "istio.io/istio@${ISTIO_VERSION}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
    [[ -n "${src}" ]] || { echo "istio.io/istio@${ISTIO_VERSION} not in the module cache" >&2; exit 1; }
    mkdir -p "${chart}/files"
    cp "${src}/manifests/charts/istio-control/istio-discovery/files/"* "${chart}/files/"
    cp "${src}/manifests/charts/istio-control/istio-discovery/values.yaml" "${chart}/"
    cp "${src}/tools/packaging/common/envoy_bootstrap.json" "${dir}/envoy_bootstrap.json.tmp"
    chmod -R u+w "${chart}" "${dir}/envoy_bootstrap.json.tmp"
    mv "${dir}/envoy_bootstrap.json.tmp" "${dir}/envoy_bootstrap.json"
  fi
  echo "${bin}"
done
