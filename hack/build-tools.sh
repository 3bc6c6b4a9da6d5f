#!/usr/bin/env bash
# Builds ko and crane from their pinned module (hack/tools/ko) into the
# cache, once: ko builds and pushes istio-aux's images, crane serves the
# real node's registry and pushes the harness's other images; and sign
# (hack/tools/sign: cosign's signing and verification, which make release
# uses), and go-licenses (hack/tools/licenses: the release's third-party
# licences). Prints the bin directory.
set -o errexit -o nounset -o pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${ISTIO_AUX_CACHE:-${root}/_output}/tools/bin"
if [[ ! -x "${bin}/ko" || ! -x "${bin}/crane" ]]; then
  start=${SECONDS}
  echo "building ko and crane into ${bin} ..." >&2
  (cd "${root}/hack/tools/ko" && GOBIN="${bin}" go install github.com/google/ko github.com/google/go-containerregistry/cmd/crane)
  echo "built ko and crane in $((SECONDS - start))s" >&2
fi
if [[ ! -x "${bin}/go-licenses" ]]; then
  (cd "${root}/hack/tools/licenses" && go build -o "${bin}/go-licenses" github.com/google/go-licenses/v2)
fi
if [[ ! -x "${bin}/sign" ]]; then
  start=${SECONDS}
  echo "building sign (cosign's libraries) into ${bin} ..." >&2
  (cd "${root}/hack/tools/sign" && go build -o "${bin}/sign" .)
  echo "built sign in $((SECONDS - start))s" >&2
fi
echo "${bin}"
