#!/usr/bin/env bash
# The fast tests: no cluster, no network beyond loopback. `make test`.
set -o errexit -o nounset -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

go vet ./...
go test -count=1 "$@" ./...
