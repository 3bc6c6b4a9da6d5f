#!/usr/bin/env bash
# Builds etcd, kube-apiserver, kube-controller-manager, kubectl, and for the
# real node's whole cluster (test/kubenode) kube-scheduler, kube-proxy and the
# kubelet, from the Go module proxy (no Docker, no release downloads) into a cache keyed by version.
# A binary that is already there is not rebuilt. Prints the bin directory.
set -o errexit -o nounset -o pipefail

K8S_VERSION="${K8S_VERSION:-v1.36.3}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${ISTIO_AUX_CACHE:-${root}/_output}/k8s-${K8S_VERSION}/bin"
mkdir -p "${bin}"

minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
# Without these the binaries report v0.0.0 and clients refuse the version skew.
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=${K8S_VERSION}"
ldflags+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor}"

cd "${root}/hack/tools/k8s"
for cmd in etcd kube-apiserver kube-controller-manager kubectl kubelet kube-scheduler kube-proxy; do
  [[ -x "${bin}/${cmd}" ]] && continue
  pkg="k8s.io/kubernetes/cmd/${cmd}"
  [[ "${cmd}" == etcd ]] && pkg="./cmd/etcd"
  start=${SECONDS}
  echo "building ${cmd} ${K8S_VERSION} ..." >&2
  GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "${ldflags}" -o "${bin}/${cmd}.tmp" "${pkg}"
  mv "${bin}/${cmd}.tmp" "${bin}/${cmd}"
  echo "built ${cmd} in $((SECONDS - start))s" >&2
done
echo "${bin}"
