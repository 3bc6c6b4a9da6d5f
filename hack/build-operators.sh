#!/usr/bin/env bash
# Builds the workload operators the real node runs (test/operators) from the
# Go module proxy, each pinned by a tools module of its own:
#   hack/tools/training-operator  Kubeflow training operator v1 (TFJob, PyTorchJob)
#   hack/tools/trainer            Kubeflow Trainer v2 and JobSet (Trainer requires
#                                 JobSet's exact version, so they share k8s.io)
# Cached by version under $ISTIO_AUX_CACHE (<name>-<version>/bin/<binary>),
# rebuilt only when missing. Their CRDs and manifests are not copied: the
# harness reads them from the same modules in the module cache at run time.
# Prints nothing on stdout; build times go to stderr.
set -o errexit -o nounset -o pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${ISTIO_AUX_CACHE:-${root}/_output}"

# shellcheck source=hack/build-pinned.sh
source "${root}/hack/build-pinned.sh"

build_pinned training-operator github.com/kubeflow/training-operator training-operator training-operator \
  github.com/kubeflow/training-operator/cmd/training-operator.v1
build_pinned trainer github.com/kubeflow/trainer/v2 trainer trainer-controller-manager \
  github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager
# JobSet reports v0.0.0-main without its version stamped in.
jobset="$(cd "${root}/hack/tools/trainer" && go list -m -f '{{.Version}}' sigs.k8s.io/jobset)"
build_pinned trainer sigs.k8s.io/jobset jobset jobset sigs.k8s.io/jobset \
  "-X sigs.k8s.io/jobset/pkg/version.GitVersion=${jobset}"
