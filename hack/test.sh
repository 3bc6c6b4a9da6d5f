#!/usr/bin/env bash
# The fast tests: no cluster, no network beyond loopback. `make test`.
set -o errexit -o nounset -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

go vet ./...
go test -count=1 "$@" ./...
# The webhook's reading of proxy.istio.io/config against Istio's own code,
# on its seeds: it builds Istio's config packages in the Istio tools module
# (the first time about a minute on 2 cores; cached after). `make fuzz`
# fuzzes it.
(cd hack/tools/istio && go test -count=1 "$@" ./agree/)
