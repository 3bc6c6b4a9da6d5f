#!/usr/bin/env bash
# The three-node suite (test/ha): a whole cluster of three real nodes, each
# in a network namespace of its own on one LAN (test/realnode), with
# istio-aux installed in its highly available shape, under faults: a node
# powered off, a node partitioned and healed, kube-apiserver and etcd
# killed, a rolling upgrade. Installs the nodes' Debian packages when
# missing (needs root), builds or reuses the cached binaries. Without root
# the tests skip and say why; with CI=true they fail instead. Arguments go
# to `go test` (e.g. -run TestHAStandalone, or -run '^TestV133MixedNodeLoss$');
# without any, the newest's tests run.
set -o errexit -o nounset -o pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"
STAGES_TITLE="e2e-ha stage times"
# shellcheck source=hack/stages.sh
source hack/stages.sh

# shellcheck source=hack/versions.sh
source hack/versions.sh
# shellcheck source=hack/node-builds.sh
source hack/node-builds.sh
node_builds
# One fault after another, each on the whole cluster: nothing in parallel.
((${#})) || set -- -skip "${SHAPED}"
timed "three-node tests" go test -tags e2e -count=1 -timeout 45m -v ./test/ha/... "$@"
