# istio-aux: a thin front door. Every target is a script in hack/.
# Every Go build here is static and path-free, as ko builds the images and
# hack/build-*.sh the tools: one build configuration, so that the compiled
# packages of the tests, the binaries and the images share Go's build cache
# (a cold CI run's `ko resolve` took 334 s recompiling every dependency,
# and takes 14 s with it).
export CGO_ENABLED := 0
export GOFLAGS := $(strip $(GOFLAGS) -trimpath)

.PHONY: test lint e2e e2e-node e2e-ha e2e-matrix bench chaos fuzz run record release verify-config build clean

test:          ## fast tests: no cluster (embedded NATS is fine); runs lint first
	hack/test.sh
lint:          ## golangci-lint (.golangci.yaml) and gofmt
	hack/lint.sh
e2e:           ## end to end on a real kube-apiserver, Job controller and kwok; config/ dry-run; ko resolve
	hack/e2e.sh
e2e-node:      ## the harness's real node (containerd, runc, kubelet in a network namespace); needs root
	hack/e2e-node.sh
e2e-ha:        ## three real nodes, istio-aux highly available, under faults (node loss, partition, restarts, upgrade); needs root
	hack/e2e-ha.sh
e2e-matrix:    ## every cell of the compatibility matrix (Kubernetes 1.32/1.33/1.36 x Istio releases x shapes); writes _output/matrix.md
	hack/e2e-matrix.sh
chaos:         ## faults: processes killed, NATS stopped, webhook down, garbage on the wire
	hack/chaos.sh
bench:         ## benchmarks, printed as one table
	hack/bench.sh
fuzz:          ## every Go fuzzer, FUZZTIME each (default 5m); not in CI
	hack/fuzz.sh
run:           ## the local demo (or the bridge alone against $KUBECONFIG)
	hack/run.sh
record:        ## re-record the CloudEvents in test/testdata from real runs
	hack/record.sh
release:       ## VERSION=vX.Y.Z KO_DOCKER_REPO=registry: the release YAML, image layouts, plugin, checksums in _output/release/
	hack/release.sh
verify-config: ## config/ only: dry-run with Knative CRDs, RBAC, offline ko resolve
	hack/verify-config.sh
build:         ## every binary, as ko would build it
	go build ./...
clean:
	rm -rf _output
