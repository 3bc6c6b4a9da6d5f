#!/usr/bin/env bash
# Everything that checks config/: the fast manifest tests, the server-side
# dry-run against a real kube-apiserver with the real Knative CRDs (needs the
# binaries of hack/build-k8s.sh), and the offline `ko resolve` of every
# ko:// image (hack/ko-resolve.sh).
set -o errexit -o nounset -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

go test -count=1 ./test/config
hack/build-k8s.sh >/dev/null
go test -count=1 -tags e2e -run TestDryRun ./test/config
hack/ko-resolve.sh config/ config/dispatch/
