#!/usr/bin/env bash
# End-to-end tests (make e2e): builds or reuses the cached Kubernetes
# binaries, CoreDNS, kwok, istiod and pilot-agent, ko and crane, istio-aux's
# binaries, the stub pilot-agent and the Envoy stand-in; runs the e2e-tagged
# tests against a real kube-apiserver, Job controller and istiod, with kwok
# as the node (test/e2e); checks config/ against the real API and builds its
# images; then runs the real-node suite (test/node) on a whole cluster with
# istio-aux installed from config/ by ko, on one with Istio CNI, and on one
# whose Istio is upgraded by canary revision with Jobs in flight, and on
# one where Helm installs, upgrades and uninstalls it; then
# the three-node suite (test/ha) under faults and with Knative Serving; and
# prints the wall time of every stage at the end. The other cells of the
# compatibility matrix (the older versions: whole clusters of 1.32 and 1.33,
# the cluster mid-upgrade, Istio's older releases, OpenShift's shape) are
# make e2e-matrix's: each old control plane costs a cold run
# ~11 minutes to build, each Istio release ~6, and CI's budget is 80. The
# mid-upgrade cell ran here until the CNI cell (2026-12-02) needed its time:
# it repeats what the matrix proves.
set -o errexit -o nounset -o pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"
STAGES_TITLE="e2e stage times"
# shellcheck source=hack/stages.sh
source hack/stages.sh
# shellcheck source=hack/versions.sh
source hack/versions.sh

timed "kubernetes binaries" hack/build-k8s.sh >/dev/null
timed "kwok" hack/build-kwok.sh >/dev/null
timed "istiod + pilot-agent" hack/build-istio.sh >/dev/null
# The canary upgrade's two releases (1.30 → 1.31.0). Each builds from its
# own dependencies (a cold run here: pilot-discovery 519 s and 581 s on 2
# cores, as long as master's); the matrix's other releases stay there.
timed "istio 1.30 + 1.31.0 (canary)" hack/build-istio.sh v1.30.mod v1.31.mod >/dev/null
timed "istio-aux binaries + stubs" hack/build-ours.sh
# The real node's whole cluster: CoreDNS, and ko and crane (its registry).
timed "coredns" hack/build-coredns.sh >/dev/null
timed "ko + crane" hack/build-tools.sh >/dev/null
# Knative Serving (compiled for ko) and Traefik, its networking layer:
# config/'s function is a Knative Service (test/knative).
timed "knative serving + traefik" hack/build-knative.sh >/dev/null
# The operators whose pods the real node's owner tests run (test/operators).
timed "training operator, trainer, jobset" hack/build-operators.sh
# pkg/decision's copy of the kubelet's restart rule, against the kubelets'
# own function, of the version built here (k8s.io/kubernetes, in the tools
# module that builds it); make e2e-matrix checks every one from 1.31 on.
timed "kubelet restart parity" hack/kubelet-parity.sh go.mod
timed "harness test" go test -tags e2e -count=1 -timeout 5m ./test/cluster/...
# istiod's injection of every pod shape, and the real pilot-agent with the
# Envoy stand-in (wait, quit, SIGTERM drain, native stop; needs root).
timed "istio harness test" go test -tags e2e -count=1 -timeout 5m ./test/istio/...
timed "e2e tests" go test -tags e2e -count=1 -timeout 20m -v ./test/e2e/... "$@"
# The real node: containerd, runc and the kubelet in a network namespace of
# the test's own, with istiod, pilot-agent and istio-aux (test/node). Where
# the machine cannot host one the tests skip and say why, except with
# CI=true, where that is a failure.
# config/ against the real API with the real Knative CRDs, and each component
# under its own ServiceAccount; then every ko:// image built offline, which
# also fills the build cache the real node's installs use.
timed "config: dry-run + RBAC" go test -tags e2e -count=1 -timeout 10m -skip "${SHAPED}" ./test/config/...
if ((EUID == 0)); then
  timed "node packages" hack/node-deps.sh
fi
# The release's signing (hack/tools/sign) against cosign's own verification
# code: a signed image, its SBOM and provenance verify; tampered, they do not.
timed "release signing (cosign)" go test -C hack/tools/sign -count=1 -v ./
# ko resolve offline, and make release as a release is made: every image an
# index of linux/amd64 and linux/arm64, the arm64 builds run under
# qemu-aarch64, the krew manifest through krew's own validation.
timed "ko resolve + release (offline)" hack/ko-resolve.sh
timed "real-node tests" go test -tags e2e -count=1 -timeout 20m -parallel 8 -v -skip "${SHAPED}" ./test/node/...
# Istio's CNI node agent on the real node (its chart's DaemonSet, the
# istio-cni plugin chained into the node's network): every pod's traffic
# captured, the core scenarios and the owners (test/node's TestCNI).
timed "Istio CNI, one node" go test -tags e2e -count=1 -timeout 30m -parallel 8 -v -run '^TestCNI$' ./test/node/...
# Istio installed by revision with a default tag, then a canary upgrade
# to the next release with Jobs in flight, the old revision removed
# (test/node's TestCanaryUpgrade).
timed "canary upgrade, 1.30 → 1.31" go test -tags e2e -count=1 -timeout 20m -v -run '^TestCanaryUpgrade$' ./test/node/...
# istio-aux installed, upgraded with Jobs in flight, rolled back and
# uninstalled by Helm from the chart make release pushed (test/node's
# TestNodeHelm), on a cluster of its own: the uninstall leaves none.
timed "Helm on the real node" go test -tags e2e -count=1 -timeout 20m -v -run '^TestNodeHelm$' ./test/node/...
# Three real nodes, istio-aux in its highly available shape, under faults
# (test/ha): one fault after another. -short leaves out the faults whose
# window alone takes minutes (the 7-minute partition past the eviction):
# make e2e-ha runs them; CI's 80-minute budget has no room for them.
timed "three-node tests" go test -tags e2e -count=1 -timeout 45m -v -short -skip "${SHAPED}" ./test/ha/...
# The function as config/ ships it, on Knative Serving, on three nodes: its
# pod's node and the activator's powered off (a cluster of its own).
timed "three nodes, Knative Serving" go test -tags e2e -count=1 -timeout 30m -v -run '^TestHAKnativeNodeLoss$' ./test/ha/...
