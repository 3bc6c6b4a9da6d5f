#!/usr/bin/env bash
# The fast tests: no cluster, no network beyond loopback. `make test`.
set -o errexit -o nounset -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

go vet ./...
hack/lint.sh
go test -count=1 "$@" ./...
# The webhook's reading of proxy.istio.io/config against Istio's own code,
# on its seeds: it builds Istio's config packages in the Istio tools module
# (the first time about a minute on 2 cores; cached after). `make fuzz`
# fuzzes it.
(cd hack/tools/istio && go test -count=1 "$@" ./agree/)
# config/monitoring's alerts and dashboard, against Prometheus's own rule
# evaluation and PromQL parser and the metrics istio-aux registers, in the
# Prometheus tools module (hack/tools/prometheus/monitoring). The first time
# it downloads ~850 MB of modules (~10 s) and builds Prometheus's rule and
# query packages: 75-125 s on 2 shared cores, std included; ~2 s cached.
(cd hack/tools/prometheus && go test -count=1 "$@" ./monitoring/)
