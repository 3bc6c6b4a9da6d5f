#!/usr/bin/env bash
# Re-record test/testdata from real runs (make record): builds or reuses the
# control-plane binaries, kwok, istio-aux's webhook and bridge and the stub
# pilot-agent, then runs test/cmd/record, which starts the local control
# plane with kwok, istiod as the sidecar injector and istio-aux, runs every
# scenario and rewrites test/testdata/<scenario>/. Takes about 30 s with cached binaries;
# bounded by RECORD_TIMEOUT (default 3m). Afterwards run
# `go test ./functions/proxyquit/ -run Replay` and review `git diff --stat test/testdata`.
set -o errexit -o nounset -o pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"
cache="${ISTIO_AUX_CACHE:-${root}/_output}"
hack/build-k8s.sh >/dev/null
hack/build-kwok.sh >/dev/null
hack/build-istio.sh >/dev/null
hack/build-ours.sh ./test/cmd/record
# The real node's scenarios need its packages (as root; it says so).
if ((EUID == 0)); then hack/node-deps.sh; fi
"${cache}/bin/record" -out "${root}/test/testdata" -timeout "${RECORD_TIMEOUT:-5m}" "$@"
