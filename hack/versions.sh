# Sourced by the e2e scripts: the Kubernetes versions beyond the newest
# (test/cluster's K8sV131, K8sV132 and K8sV133; hack/tools/k8s/v1.MINOR.mod each),
# and the tests named after a shape of cluster (test/mesh/shapes.go: a
# version, Knative Serving on three nodes, Istio CNI, a canary upgrade,
# OpenShift's shape), and the tests that need a cluster of their own
# (test/node's TestNodeHelm: Helm installs and uninstalls istio-aux), which
# run in a `go test` of their own: SHAPED is the -skip pattern that leaves
# them out of a suite's default run.
K8S_OLDEST=v1.31.14
K8S_V132=v1.32.13
K8S_MIXED=v1.33.13
SHAPED='^Test(V1[0-9][0-9]|HAKnative|HACNI|CNI|Canary|OpenShift|NodeHelm)'
