#!/usr/bin/env bash
# Builds the release's and the harness's tools from their pinned modules
# into the cache: ko and crane (hack/tools/ko: ko builds and pushes
# istio-aux's images, crane serves the real node's registry and pushes the
# harness's other images), sign (hack/tools/sign: cosign's signing and
# verification, which make release uses) and go-licenses
# (hack/tools/licenses: the release's third-party licences). Prints the bin
# directory.
#
# A tool is rebuilt when its module's files, the Go version or GOFLAGS
# change, not only when it is missing: a binary built before such a change
# behaves as the old one (a go-licenses built with -trimpath, say, cannot
# tell the standard library from the rest; see hack/release.sh).
set -o errexit -o nounset -o pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${ISTIO_AUX_CACHE:-${root}/_output}/tools/bin"
mkdir -p "${bin}"

# stamp DIR: what a build from the module in DIR depends on here.
stamp() {
  { go version; echo "GOFLAGS=${GOFLAGS:-}"
    (cd "$1" && find . -type f \( -name '*.go' -o -name go.mod -o -name go.sum \) -print0 | sort -z | xargs -0 sha256sum)
  } | sha256sum | cut -d' ' -f1
}

# build NAME DIR BINARY... -- COMMAND...: runs COMMAND in DIR unless every
# BINARY exists and was built from the same stamp.
build() {
  local name="$1" dir="${root}/$2"; shift 2
  local binaries=()
  while [[ "$1" != -- ]]; do binaries+=("${bin}/$1"); shift; done
  shift
  local want have
  want="$(stamp "${dir}")"
  have="$(cat "${bin}/.${name}.stamp" 2>/dev/null || true)"
  local missing=0
  for b in "${binaries[@]}"; do [[ -x "${b}" ]] || missing=1; done
  if [[ "${missing}" == 0 && "${have}" == "${want}" ]]; then return; fi
  local start=${SECONDS}
  echo "building ${name} into ${bin} ..." >&2
  (cd "${dir}" && "$@")
  echo "${want}" >"${bin}/.${name}.stamp"
  echo "built ${name} in $((SECONDS - start))s" >&2
}

build ko hack/tools/ko ko crane -- \
  env GOBIN="${bin}" go install github.com/google/ko github.com/google/go-containerregistry/cmd/crane
build go-licenses hack/tools/licenses go-licenses -- \
  go build -o "${bin}/go-licenses" github.com/google/go-licenses/v2
build sign hack/tools/sign sign -- \
  go build -o "${bin}/sign" .
echo "${bin}"
