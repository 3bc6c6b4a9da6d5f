#!/usr/bin/env bash
# The kubelet-parity table (pkg/decision/testdata/kubelet-restart.json)
# against each kubelet's own ShouldContainerBeRestarted: one test source,
# compiled against each module file of hack/tools/k8s given (go.mod: the
# newest; v1.31.mod ... v1.35.mod; default: all of them). -update after the
# arguments writes each version's column instead of checking it.
set -o errexit -o nounset -o pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/tools/k8s"
modfiles=()
while (($#)) && [[ "$1" != -* ]]; do modfiles+=("$1"); shift; done
((${#modfiles[@]})) || modfiles=(go.mod v1.*.mod)
for m in "${modfiles[@]}"; do
  GOFLAGS=-mod=mod CGO_ENABLED=0 go test -trimpath -count=1 -modfile="${m}" ./kubeletparity/ -args "$@"
done
