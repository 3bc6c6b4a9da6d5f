#!/usr/bin/env bash
# The real-node suite: containerd, runc and the kubelet v1.36 in a network
# namespace of the test binary's own (test/realnode/netns.go), proving the
# kubelet behaviour the kwok Stages imitate (test/node). Installs the node's
# Debian packages when missing (needs root), builds or reuses the cached
# Kubernetes binaries; the test builds and imports its own images. Without
# root the tests skip and say why; with CI=true they fail instead.
# Arguments go to `go test` (e.g. -run TestNodeExec, or -run '^TestV132$' for
# a version's run); without any, the newest's tests run.
set -o errexit -o nounset -o pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"
STAGES_TITLE="e2e-node stage times"
# shellcheck source=hack/stages.sh
source hack/stages.sh

# shellcheck source=hack/versions.sh
source hack/versions.sh
# shellcheck source=hack/node-builds.sh
source hack/node-builds.sh
node_builds
# Knative Serving (compiled for ko) and Traefik, its networking layer:
# config/'s function is a Knative Service (test/knative).
timed "knative serving 1.23, 1.17 + traefik" hack/build-knative.sh go.mod v1.17.mod >/dev/null
# The operators whose pods the TestOwner* tests run (test/operators).
timed "training operator, trainer, jobset" hack/build-operators.sh
# The tests mostly wait on the kubelet: run them all at once, not two by two.
((${#})) || set -- -skip "${SHAPED}"
timed "real-node tests" go test -tags e2e -count=1 -timeout 20m -parallel 8 -v ./test/node/... "$@"
