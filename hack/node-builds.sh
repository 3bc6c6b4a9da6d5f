# Sourced by the suites that run real nodes (hack/e2e-node.sh,
# hack/e2e-ha.sh), after hack/stages.sh: node_builds installs the nodes'
# Debian packages when missing (as root) and builds or reuses what every
# real-node cluster runs, each a timed stage.
node_builds() {
  if ((EUID == 0)); then
    timed "node packages" hack/node-deps.sh
  fi
  # The newest in full, or only its etcd and kubectl (every cluster's) with
  # NEWEST_COMMANDS="etcd kubectl" where only older versions' cells run.
  K8S_COMMANDS="${NEWEST_COMMANDS:-}" timed "kubernetes binaries" hack/build-k8s.sh >/dev/null
  # shellcheck source=hack/versions.sh
  source hack/versions.sh
  timed "kubernetes 1.31, 1.32 and 1.33" hack/build-k8s.sh "${K8S_OLDEST}" "${K8S_V132}" "${K8S_MIXED}" >/dev/null
  # istiod and pilot-agent for the mesh, the Envoy stand-in and istio-aux's
  # own binaries.
  timed "istiod + pilot-agent" hack/build-istio.sh >/dev/null
  timed "istio-aux binaries + stubs" hack/build-ours.sh
  # The whole cluster: CoreDNS, and ko and crane (its registry).
  timed "coredns" hack/build-coredns.sh >/dev/null
  timed "ko + crane" hack/build-tools.sh >/dev/null
}
