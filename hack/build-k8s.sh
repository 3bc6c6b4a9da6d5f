#!/usr/bin/env bash
# Builds Kubernetes from the Go module proxy (no Docker, no release
# downloads) into a cache keyed by version, one bin directory a version:
# hack/build-k8s.sh [VERSION...] (default: the newest, the version
# hack/tools/k8s/go.mod requires). The newest gets every command the
# harness runs: etcd, kube-apiserver, kube-controller-manager, kubectl, the
# kubelet, kube-scheduler and kube-proxy. An older version (its module file
# hack/tools/k8s/v1.MINOR.mod, which must require exactly that version) gets
# what a cluster or a node of that version runs: the control plane's three,
# the kubelet and kube-proxy; etcd and kubectl stay the newest's, as a
# cluster's etcd and a user's kubectl are not the API server's. K8S_COMMANDS
# narrows the list (a node of an older version needs only its kubelet and
# kube-proxy). A binary that is already there is not rebuilt. Prints the
# bin directory of each version, one a line.
set -o errexit -o nounset -o pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools="${root}/hack/tools/k8s"
cd "${tools}"

# required MODFILE prints the k8s.io/kubernetes version MODFILE requires.
required() { awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ { print $2; exit }' "$1"; }

newest="$(required go.mod)"
versions=("$@")
((${#versions[@]})) || versions=("${K8S_VERSION:-${newest}}")

for version in "${versions[@]}"; do
  minor="${version#v1.}"; minor="${minor%%.*}"
  if [[ "${version}" == "${newest}" ]]; then
    modfile=go.mod
    cmds=(etcd kube-apiserver kube-controller-manager kubectl kubelet kube-scheduler kube-proxy)
  else
    modfile="v1.${minor}.mod"
    cmds=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy)
    if [[ ! -f "${modfile}" || "$(required "${modfile}")" != "${version}" ]]; then
      echo "no module file for Kubernetes ${version}: hack/tools/k8s/${modfile} must require k8s.io/kubernetes ${version}" >&2
      exit 1
    fi
  fi
  if [[ -n "${K8S_COMMANDS:-}" ]]; then
    read -r -a cmds <<<"${K8S_COMMANDS}"
  fi
  bin="${ISTIO_AUX_CACHE:-${root}/_output}/k8s-${version}/bin"
  mkdir -p "${bin}"
  # Without these the binaries report v0.0.0 and clients refuse the skew.
  ldflags="-s -w -X k8s.io/component-base/version.gitVersion=${version}"
  ldflags+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor}"
  for cmd in "${cmds[@]}"; do
    [[ -x "${bin}/${cmd}" ]] && continue
    pkg="k8s.io/kubernetes/cmd/${cmd}"
    [[ "${cmd}" == etcd ]] && pkg="./cmd/etcd"
    start=${SECONDS}
    echo "building ${cmd} ${version} ..." >&2
    GOFLAGS=-mod=mod CGO_ENABLED=0 go build -modfile="${modfile}" -trimpath -ldflags "${ldflags}" -o "${bin}/${cmd}.tmp" "${pkg}"
    mv "${bin}/${cmd}.tmp" "${bin}/${cmd}"
    echo "built ${cmd} ${version} in $((SECONDS - start))s" >&2
  done
  echo "${bin}"
done
