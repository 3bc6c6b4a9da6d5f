#!/usr/bin/env bash
# Builds CoreDNS, the real node's cluster DNS (test/kubenode), from the Go
# module proxy: hack/tools/coredns pins github.com/coredns/coredns and links
# only the plugins the cluster's Corefile uses. Cached by version; prints the
# bin directory.
set -o errexit -o nounset -o pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools="${root}/hack/tools/coredns"
version="$(cd "${tools}" && go list -m -f '{{.Version}}' github.com/coredns/coredns)"
bin="${ISTIO_AUX_CACHE:-${root}/_output}/coredns-${version}/bin"
mkdir -p "${bin}"
if [[ ! -x "${bin}/coredns" ]]; then
  start=${SECONDS}
  echo "building coredns ${version} ..." >&2
  # Static: it runs in a one-layer image without libc.
  (cd "${tools}" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "${bin}/coredns.tmp" .)
  mv "${bin}/coredns.tmp" "${bin}/coredns"
  echo "built coredns in $((SECONDS - start))s" >&2
fi
echo "${bin}"
