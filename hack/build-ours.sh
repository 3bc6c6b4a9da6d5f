#!/usr/bin/env bash
# Builds what the local control plane's tools run of ours into the cache:
# the webhook and bridge binaries, the stub pilot-agent that kwok execs as
# istio-proxy's quit command, the Envoy stand-in the real pilot-agent runs
# (static: it goes into the distroless proxy image), and any further main
# packages given as arguments (into the same bin/). Go's build cache makes a
# rebuild cheap.
#
#   hack/build-ours.sh ./functions/proxyquit/cmd/proxyquit
set -o errexit -o nounset -o pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"
cache="${ISTIO_AUX_CACHE:-${root}/_output}"
mkdir -p "${cache}/bin" "${cache}/stub/bin" "${cache}/envoy-standin"
go build -o "${cache}/stub/bin/pilot-agent" ./test/cmd/pilot-agent
CGO_ENABLED=0 go build -trimpath -o "${cache}/envoy-standin/envoy" ./test/cmd/envoy
go build -o "${cache}/bin/" ./webhook/cmd/webhook ./bridge/cmd/bridge ./cmd/allinone "$@"
