#!/usr/bin/env bash
# Chaos tests (make chaos): builds or reuses the control-plane binaries and
# istiod, builds istio-aux's binaries, nats-server and the stub pilot-agent,
# then runs test/chaos against a real kube-apiserver + Job controller + kwok
# + istiod as the sidecar injector: Jobs run while the bridge, dispatcher and
# function are SIGKILLed at random and NATS is stopped for 30 s; garbage is
# sent on the wire; the webhook goes down.
# Knobs: CHAOS_JOBS (300), CHAOS_SEED (random, printed), CHAOS_VERBOSE=1.
# Extra arguments go to `go test` (e.g. -run TestGarbage).
set -o errexit -o nounset -o pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"

hack/build-k8s.sh >/dev/null
hack/build-kwok.sh >/dev/null
hack/build-istio.sh >/dev/null
# The function and nats-server as processes of their own, so that each can be
# killed and restarted.
hack/build-ours.sh ./functions/proxyquit/cmd/proxyquit github.com/nats-io/nats-server/v2
start=${SECONDS}
go test -tags chaos -count=1 -timeout 20m -v ./test/chaos/... "$@"
echo "chaos tests: $((SECONDS - start))s"
