#!/usr/bin/env bash
# The local demo (make run): builds what it needs, then execs hack/demo.
# Without KUBECONFIG or ~/.kube/config it runs the whole local stack — the
# control plane, a real kubelet node where the machine can host one (else
# kwok's simulated node; it says which), istiod as the sidecar injector and
# istio-aux — and submits the demo Job; with one it runs the all-in-one
# bridge alone against that cluster. On the real node the demo is the seed's
# own: its TFJob, run by the Kubeflow training operator, first without
# istio-aux, then with the namespace opted in.
#
# The real node needs root and Debian's containerd, runc and CNI plugins.
# When they are missing this says so and installs them (hack/node-deps.sh);
# ISTIO_AUX_NODE=0 skips that and runs the demo on kwok.
set -o errexit -o nounset -o pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"
cache="${ISTIO_AUX_CACHE:-${root}/_output}"
mkdir -p "${cache}/bin"
go build -o "${cache}/bin/allinone" ./cmd/allinone
export ISTIO_AUX_BRIDGE="${cache}/bin/allinone"
if [[ -z "${KUBECONFIG:-}" && ! -f "${HOME}/.kube/config" ]]; then
  echo "building the control plane, the kubelet, kube-proxy, CoreDNS, kwok, istiod, pilot-agent, ko, crane and the Kubeflow operators (cached after the first run) ..." >&2
  hack/build-k8s.sh >/dev/null
  hack/build-kwok.sh >/dev/null
  hack/build-istio.sh >/dev/null
  hack/build-ours.sh
  hack/build-coredns.sh >/dev/null
  hack/build-tools.sh >/dev/null
  # The Kubeflow training operator for the seed's TFJob story (real node).
  hack/build-operators.sh
  if [[ "${ISTIO_AUX_NODE:-1}" == 0 ]]; then
    export ISTIO_AUX_NO_NODE="ISTIO_AUX_NODE=0"
  elif ((EUID == 0)); then
    if ! hack/node-deps.sh; then
      echo "run: the real node's packages could not be installed; the demo runs on kwok" >&2
      export ISTIO_AUX_NO_NODE="hack/node-deps.sh failed"
    fi
  fi
fi
go build -o "${cache}/bin/local" ./hack/demo
exec "${cache}/bin/local"
