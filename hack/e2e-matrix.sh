#!/usr/bin/env bash
# The whole compatibility matrix (make e2e-matrix): every cell of the
# README's table, each a `go test` run of its own on a cluster of its shape
# (test/mesh/shapes.go), after building every version it needs: Kubernetes
# 1.31, 1.32 and 1.33 besides the newest, and Istio 1.24.2, 1.26.1, 1.27.9, 1.28.3,
# 1.30 (release-1.30 after 1.30.3) and 1.31.0 besides the default build, and
# Knative Serving 1.17 for the 1.31 and 1.32 clusters. The kubelet-parity table is checked against
# every kubelet from 1.31 to 1.36. Writes _output/matrix.md, a table of the
# cells with the test that ran each, its result and the date, and exits
# non-zero if a cell failed. MATRIX_NEWEST=0 leaves out the newest's own
# suites (make e2e runs them), and builds of the newest Kubernetes only
# etcd and kubectl, which every cluster runs: a cell builds only what its
# shape runs.
set -o errexit -o nounset -o pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"
STAGES_TITLE="e2e-matrix stage times"
# shellcheck source=hack/stages.sh
source hack/stages.sh
# shellcheck source=hack/versions.sh
source hack/versions.sh
# shellcheck source=hack/node-builds.sh
source hack/node-builds.sh
[[ "${MATRIX_NEWEST:-1}" == 0 ]] && export NEWEST_COMMANDS="etcd kubectl"
node_builds
timed "istio 1.24.2, 1.26.1, 1.27.9, 1.28.3, 1.30, 1.31.0" hack/build-istio.sh v1.24.mod v1.26.mod v1.27.mod v1.28.mod v1.30.mod v1.31.mod >/dev/null
if [[ "${MATRIX_NEWEST:-1}" != 0 ]]; then
  timed "knative serving 1.23, 1.17 + traefik" hack/build-knative.sh go.mod v1.17.mod >/dev/null
  timed "training operator, trainer, jobset" hack/build-operators.sh
else
  timed "knative serving 1.17 + traefik" hack/build-knative.sh v1.17.mod >/dev/null
fi
timed "kwok" hack/build-kwok.sh >/dev/null
timed "kubelet restart parity, 1.31 to 1.36" hack/kubelet-parity.sh

out="${ISTIO_AUX_CACHE:-${root}/_output}/matrix.md"
mkdir -p "$(dirname "${out}")"
rows=()
failed=0
# cell KUBERNETES ISTIO SHAPE PACKAGE TEST [TIMEOUT]: one go test run.
cell() {
  local k8s="$1" istio="$2" shape="$3" pkg="$4" run="$5" timeout="${6:-20m}" result=pass
  local args=(-run "${run}")
  [[ "${run}" == skip ]] && args=(-skip "${SHAPED}")
  if ! timed "${pkg} ${run}" go test -tags e2e -count=1 -timeout "${timeout}" -parallel 8 -v "${args[@]}" "./${pkg}/..."; then
    result=FAIL
    failed=1
  fi
  rows+=("| ${k8s} | ${istio} | ${shape} | \`${pkg}\` \`${run/skip/(the suite)}\` | ${result} | $(date -u +%Y-%m-%d) |")
}
if [[ "${MATRIX_NEWEST:-1}" != 0 ]]; then
  cell "1.36" "master (1.30 cut)" "one node, Knative Serving" test/node skip 25m
  cell "1.36" "master (1.30 cut)" "three nodes under faults" test/ha skip 45m
  cell "1.36" "master (1.30 cut)" "three nodes, Knative Serving, two nodes lost in turn" test/ha '^TestHAKnativeNodeLoss$' 30m
  cell "1.36" "master (1.30 cut), Istio CNI" "one node: the core scenarios, the owners, traffic captured" test/node '^TestCNI$' 30m
  cell "1.36" "1.30 → 1.31.0, installed by revision, canary upgrade" "one node, Jobs in flight" test/node '^TestCanaryUpgrade$'
  cell "1.36" "master (1.30 cut)" "one node, istio-aux by Helm: install, upgrade and rollback with Jobs in flight, uninstall" test/node '^TestNodeHelm$'
  cell "1.36" "master (1.30 cut), Istio CNI" "three nodes: one powered on with Jobs placed before its CNI agent is ready" test/ha '^TestHACNIStartRace$' 30m
fi
cell "1.31" "master (1.30 cut), auto" "config/ against the API server" test/config '^TestV131$' 10m
cell "1.32" "master (1.30 cut), auto" "config/ against the API server" test/config '^TestV132$' 10m
cell "1.33" "master (1.30 cut), auto" "config/ against the API server" test/config '^TestV133$' 10m
cell "1.31" "master (1.30 cut), auto" "one node, Knative Serving 1.17" test/node '^TestV131$'
cell "1.32" "master (1.30 cut), auto" "one node, Knative Serving 1.17" test/node '^TestV132$'
cell "1.32" "1.24.2" "one node" test/node '^TestV132Istio124$'
cell "1.32" "1.28.3, auto (classic), Istio CNI" "one node: the core scenarios, the owners, traffic captured" test/node '^TestV132Istio128CNI$' 30m
cell "1.31" "1.27.9, OpenShift profile, Istio CNI, revision default-v1-27-9" "one node, the OpenShift stand-in" test/node '^TestOpenShift$'
cell "1.33" "1.26.1" "one node" test/node '^TestV133$'
cell "1.33" "1.27.9, auto (native)" "one node" test/node '^TestV133Istio127$'
cell "1.33 (kubelets 1.33, 1.32, 1.32)" "master (1.30 cut), auto" "three nodes, one lost" test/ha '^TestV133MixedNodeLoss$'
cell "1.33 (kubelets 1.33, 1.32, 1.32)" "1.27.9, auto" "three nodes, one lost" test/ha '^TestV133MixedIstio127NodeLoss$'
{
  echo "| Kubernetes | Istio | shape | test | result | run |"
  echo "|---|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
} >"${out}"
cat "${out}"
exit "${failed}"
