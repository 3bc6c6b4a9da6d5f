#!/usr/bin/env bash
# Builds Istio's pilot-agent and pilot-discovery (istiod), and Istio CNI's
# node agent (install-cni) and plugin (istio-cni), from the Go module proxy
# (no Docker, no release downloads) into a cache keyed by version, and
# copies next to them what test/istio reads at run time from the same module
# version: the istio-discovery and istio-cni charts, which test/istio
# renders with Helm's own code as `helm install` would, and the Envoy
# bootstrap template pilot-agent renders. Nothing of Istio's is committed
# here. A file that is already there is not rebuilt.
# hack/build-istio.sh [MODFILE...]: each a module file of hack/tools/istio
# (go.mod, the default, master after the 1.30 cut; v1.24.mod … v1.31.mod:
# a release's commit each, as test/istio's Releases name them, and what the
# file replaces and why). Prints the bin directory of each.
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
  for pkg in pilot/cmd/pilot-agent pilot/cmd/pilot-discovery cni/cmd/install-cni cni/cmd/istio-cni; do
    cmd="${pkg##*/}"
    [[ -x "${bin}/${cmd}" ]] && continue
    start=${SECONDS}
    echo "building ${cmd} ${ISTIO_VERSION} (${modfile}) ..." >&2
    # Istio's own builds are static too: the proxy image is distroless.
    GOFLAGS=-mod=mod CGO_ENABLED=0 go build -modfile="${modfile}" -trimpath -ldflags "-s -w" \
      -o "${bin}/${cmd}.tmp" "istio.io/istio/${pkg}"
    mv "${bin}/${cmd}.tmp" "${bin}/${cmd}"
    echo "built ${cmd} in $((SECONDS - start))s" >&2
  done

  # The charts and the bootstrap template, from the module cache.
  if [[ ! -f "${dir}/envoy_bootstrap.json" || ! -f "${dir}/istio-discovery/Chart.yaml" || ! -f "${dir}/istio-cni/Chart.yaml" ]]; then
    src="$(GOFLAGS=-mod=mod go mod download -modfile="${modfile}" -json "istio.io/istio@${ISTIO_VERSION}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
    [[ -n "${src}" ]] || { echo "istio.io/istio@${ISTIO_VERSION} not in the module cache" >&2; exit 1; }
    for chart in istio-control/istio-discovery istio-cni; do
      rm -rf "${dir}/${chart##*/}"
      cp -R "${src}/manifests/charts/${chart}" "${dir}/${chart##*/}.tmp"
      chmod -R u+w "${dir}/${chart##*/}.tmp"
      mv "${dir}/${chart##*/}.tmp" "${dir}/${chart##*/}"
    done
    cp "${src}/tools/packaging/common/envoy_bootstrap.json" "${dir}/envoy_bootstrap.json.tmp"
    chmod u+w "${dir}/envoy_bootstrap.json.tmp"
    mv "${dir}/envoy_bootstrap.json.tmp" "${dir}/envoy_bootstrap.json"
  fi
  echo "${bin}"
done
