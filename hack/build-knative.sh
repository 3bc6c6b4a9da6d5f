#!/usr/bin/env bash
# Builds what the real node's Knative Serving needs (test/knative), from the
# Go module proxy, into versioned directories of the cache; a directory
# that is already there is not rebuilt. Prints Traefik's bin directory.
#  - Knative Serving (hack/tools/knative): its five commands compiled once,
#    as ko compiles them (-trimpath, static), so that the harness's
#    `ko resolve` of the module's config/core only links and pushes. Its
#    images are built by ko at install time; the stamp only says the Go
#    build cache was filled once.
#    hack/build-knative.sh [MODFILE...]: each a module file of
#    hack/tools/knative (go.mod, the default: the release istio-aux builds
#    with; v1.17.mod: OpenShift Serverless 1.37's, for Kubernetes 1.30 to 1.33, as
#    test/knative's Releases name them).
#  - Traefik (hack/tools/traefik), the networking layer: one static binary,
#    which the harness puts into an image of its own.
set -o errexit -o nounset -o pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${ISTIO_AUX_CACHE:-${root}/_output}"
export GOFLAGS=-mod=mod CGO_ENABLED=0

tools="${root}/hack/tools/knative"
modfiles=("$@")
((${#modfiles[@]})) || modfiles=(go.mod)
for modfile in "${modfiles[@]}"; do
  version="$(cd "${tools}" && go list -modfile="${modfile}" -m -f '{{.Version}}' knative.dev/serving)"
  dir="${cache}/knative-serving-${version}"
  [[ -f "${dir}/compiled" ]] && continue
  start=${SECONDS}
  echo "compiling knative serving ${version} (${modfile}) ..." >&2
  mkdir -p "${dir}"
  # Several packages and no -o: compiled into the build cache, not linked.
  (cd "${tools}" && GOOS=linux go build -modfile="${modfile}" -trimpath knative.dev/serving/cmd/{controller,webhook,autoscaler,activator,queue})
  touch "${dir}/compiled"
  echo "compiled knative serving ${version} in $((SECONDS - start))s" >&2
done

# shellcheck source=hack/build-pinned.sh
source "${root}/hack/build-pinned.sh"
build_pinned traefik github.com/traefik/traefik/v3 traefik traefik github.com/traefik/traefik/v3/cmd/traefik
echo "${pinned_bin}"
