#!/usr/bin/env bash
# The local demo (make run): builds what it needs, then execs test/cmd/local.
# Without KUBECONFIG or ~/.kube/config it runs a whole local control plane
# with kwok, istiod as the sidecar injector and istio-aux, and submits the demo
# Job; with one it runs the bridge alone against that cluster.
set -o errexit -o nounset -o pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"
cache="${ISTIO_AUX_CACHE:-${root}/_output}"
mkdir -p "${cache}/bin" "${cache}/stub/bin"
go build -o "${cache}/bin/allinone" ./bridge/cmd/allinone
export ISTIO_AUX_BRIDGE="${cache}/bin/allinone"
if [[ -z "${KUBECONFIG:-}" && ! -f "${HOME}/.kube/config" ]]; then
  hack/build-k8s.sh >/dev/null
  hack/build-kwok.sh >/dev/null
  hack/build-istio.sh >/dev/null
  go build -o "${cache}/bin/webhook" ./webhook/cmd/webhook
  go build -o "${cache}/stub/bin/pilot-agent" ./test/cmd/pilot-agent
fi
go build -o "${cache}/bin/local" ./test/cmd/local
exec "${cache}/bin/local"
