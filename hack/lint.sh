#!/usr/bin/env bash
# golangci-lint with the repository's .golangci.yaml, and gofmt. `make lint`;
# `make test` runs it first. golangci-lint is built once from its pinned
# module (hack/tools/golangci-lint) into the cache: about 5 minutes on 2
# shared cores cold, and its first analysis of the tree about 7 (both cached
# after: a run of an unchanged tree takes seconds).
set -o errexit -o nounset -o pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"
bin="${ISTIO_AUX_CACHE:-${root}/_output}/tools/bin"
if [[ ! -x "${bin}/golangci-lint" ]]; then
  start=${SECONDS}
  echo "building golangci-lint into ${bin} ..." >&2
  (cd hack/tools/golangci-lint && GOBIN="${bin}" go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint)
  echo "built golangci-lint in $((SECONDS - start))s" >&2
fi
# gofmt -l over every Go file, the tool modules' too (golangci-lint reads
# only this module).
unformatted="$(gofmt -l $(git ls-files '*.go'))"
if [[ -n "${unformatted}" ]]; then
  echo "gofmt -l: these files are not formatted (run gofmt -w):" >&2
  echo "${unformatted}" >&2
  exit 1
fi
"${bin}/golangci-lint" run "$@" ./...
