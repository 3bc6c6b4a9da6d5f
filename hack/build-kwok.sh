#!/usr/bin/env bash
# Builds kwok from the Go module proxy into a cache keyed by version (kept out
# of hack/tools/k8s: kwok moves grpc underneath kube-apiserver). Prints the
# bin directory. A binary that is already there is not rebuilt.
set -o errexit -o nounset -o pipefail

KWOK_VERSION="${KWOK_VERSION:-v0.8.0}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${ISTIO_AUX_CACHE:-${root}/_output}/kwok-${KWOK_VERSION}/bin"
mkdir -p "${bin}"
if [[ ! -x "${bin}/kwok" ]]; then
  start=${SECONDS}
  echo "building kwok ${KWOK_VERSION} ..." >&2
  # Outside the main module so its go.mod does not pull kwok's dependencies.
  (cd "${bin}" && GOFLAGS= GOBIN="${bin}" CGO_ENABLED=0 go install -trimpath "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}")
  echo "built kwok in $((SECONDS - start))s" >&2
fi
# kwok needs its CRDs (Stage, Exec, ClusterExec) and a node Stage applied
# before it starts; they come from the same module version in the module
# cache and are copied next to the binary so test/cluster needs no Go toolchain.
manifests="${bin}/../manifests"
if [[ ! -f "${manifests}/node-initialize.yaml" ]]; then
  src="$(cd "${bin}" && GOFLAGS= go mod download -json "sigs.k8s.io/kwok@${KWOK_VERSION}" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  mkdir -p "${manifests}"
  for crd in stages execs clusterexecs; do
    cp "${src}/kustomize/crd/bases/kwok.x-k8s.io_${crd}.yaml" "${manifests}/"
  done
  cp "${src}/kustomize/stage/node/fast/node-initialize.yaml" "${manifests}/"
  chmod u+w "${manifests}"/*.yaml
fi
echo "${bin}"
