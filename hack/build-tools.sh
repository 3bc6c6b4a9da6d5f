#!/usr/bin/env bash
# Builds ko and crane from their pinned module (hack/tools/ko) into the
# cache, once: ko builds and pushes istio-aux's images, crane serves the
# real node's registry and pushes the harness's other images. Prints the
# bin directory.
set -o errexit -o nounset -o pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${ISTIO_AUX_CACHE:-${root}/_output}/tools/bin"
if [[ ! -x "${bin}/ko" || ! -x "${bin}/crane" ]]; then
  start=${SECONDS}
  echo "building ko and crane into ${bin} ..." >&2
  (cd "${root}/hack/tools/ko" && GOBIN="${bin}" go install github.com/google/ko github.com/google/go-containerregistry/cmd/crane)
  echo "built ko and crane in $((SECONDS - start))s" >&2
fi
echo "${bin}"
