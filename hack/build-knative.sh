#!/usr/bin/env bash
# Builds what the real node's Knative Serving needs (test/knative), from the
# Go module proxy, into versioned directories of the cache; a directory
# that is already there is not rebuilt. Prints Traefik's bin directory.
#  - Knative Serving (hack/tools/knative): its five commands compiled once,
#    as ko compiles them (-trimpath, static), so that the harness's
#    `ko resolve` of the module's config/core only links and pushes. Its
#    images are built by ko at install time; the stamp only says the Go
#    build cache was filled once.
#  - Traefik (hack/tools/traefik), the networking layer: one static binary,
#    which the harness puts into an image of its own.
set -o errexit -o nounset -o pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${ISTIO_AUX_CACHE:-${root}/_output}"
export GOFLAGS=-mod=mod CGO_ENABLED=0

tools="${root}/hack/tools/knative"
version="$(cd "${tools}" && go list -m -f '{{.Version}}' knative.dev/serving)"
dir="${cache}/knative-serving-${version}"
if [[ ! -f "${dir}/compiled" ]]; then
  start=${SECONDS}
  echo "compiling knative serving ${version} ..." >&2
  mkdir -p "${dir}"
  # Several packages and no -o: compiled into the build cache, not linked.
  (cd "${tools}" && GOOS=linux go build -trimpath knative.dev/serving/cmd/{controller,webhook,autoscaler,activator,queue})
  touch "${dir}/compiled"
  echo "compiled knative serving in $((SECONDS - start))s" >&2
fi

# shellcheck source=hack/build-pinned.sh
source "${root}/hack/build-pinned.sh"
build_pinned traefik github.com/traefik/traefik/v3 traefik traefik github.com/traefik/traefik/v3/cmd/traefik
echo "${pinned_bin}"
