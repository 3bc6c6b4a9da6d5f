#!/usr/bin/env bash
# Everything that checks config/: the fast manifest tests and, against a real
# kube-apiserver (binaries from hack/build-k8s.sh), the server-side dry-run
# with the real Knative CRDs, the RBAC review, and the webhook and bridge
# binaries run under their own ServiceAccounts; then the offline `ko resolve`
# of every ko:// image (hack/ko-resolve.sh). Extra args go to `go test`.
set -o errexit -o nounset -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

hack/build-k8s.sh >/dev/null
go test -count=1 -tags e2e -timeout 10m "$@" ./test/config
hack/ko-resolve.sh config/ config/dispatch/
