#!/usr/bin/env bash
# Builds CoreDNS, the real node's cluster DNS (test/realnode), from the Go
# module proxy: hack/tools/coredns pins github.com/coredns/coredns and links
# only the plugins the cluster's Corefile uses. Cached by version; prints the
# bin directory.
set -o errexit -o nounset -o pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${ISTIO_AUX_CACHE:-${root}/_output}"
# shellcheck source=hack/build-pinned.sh
source "${root}/hack/build-pinned.sh"
# The tools module's own main package: CoreDNS with the plugins it links.
build_pinned coredns github.com/coredns/coredns coredns coredns .
echo "${pinned_bin}"
