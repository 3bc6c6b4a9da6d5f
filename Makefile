# istio-aux: a thin front door. Every target is a script in hack/.
.PHONY: test e2e bench chaos run build clean

test:    ## fast tests: no cluster (embedded NATS is fine)
	hack/test.sh
e2e:     ## end-to-end on a real kube-apiserver, Job controller and kwok
	hack/e2e.sh
bench:   ## benchmarks, printed as one table
	hack/bench.sh
run:     ## the local demo (or istio-aux alone against $KUBECONFIG)
	hack/run.sh
build:   ## every binary, as ko would build it
	go build ./...
clean:
	rm -rf _output
