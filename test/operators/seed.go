package operators

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/images"
	"github.com/istio-aux/istio-aux/test/mesh"
	"github.com/istio-aux/istio-aux/test/poll"
)

// The seed's story (datastrophic/istio-aux's README): a TFJob `mnist`
// created in a namespace with Istio's injection on gets stuck, its pods
// NotReady with only istio-proxy running; deleted, the namespace labelled
// io.datastrophic/istio-aux=enabled, created again, every pod Completes.

// SeedTFJob is the seed's tfjob.yaml as its README writes it; only the
// image differs (the training app installed as python: it downloads
// through the proxy at start, reads TF_CONFIG and reaches the other worker
// by its Service name through the cluster's DNS).
var SeedTFJob = []byte(strings.ReplaceAll(`apiVersion: kubeflow.org/v1
kind: TFJob
metadata:
  name: mnist
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 2
      restartPolicy: OnFailure
      template:
        spec:
          containers:
          - name: tensorflow
            image: IMAGE
            command: ['python', '-u', 'mnist.py']
`, "IMAGE", images.PythonRef))

// SeedWorkers are the pods the training operator makes of SeedTFJob.
var SeedWorkers = []string{"mnist-worker-0", "mnist-worker-1"}

// SeedOptIn is the label the seed's README puts on the namespace, which
// istio-aux honours as its own (keys.LegacyLabel).
var SeedOptIn = keys.LegacyLabel + "=" + keys.LegacyLabelValue

// Stuck reports a worker as the seed describes it without istio-aux: its
// training container exited 0, its proxy still running, so the pod stays
// Running and NotReady (1/2).
func Stuck(p *corev1.Pod) bool { return mesh.StuckDone(p, "tensorflow") }

// Completed reports a pod `kubectl get pods` shows as Completed.
func Completed(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded }

// WaitPods waits until every named pod of ns satisfies cond and returns
// them; the error says where each pod is.
func WaitPods(ctx context.Context, c *cluster.Cluster, ns string, names []string, timeout time.Duration, cond func(*corev1.Pod) bool) ([]corev1.Pod, error) {
	var pods []corev1.Pod
	err := poll.Until(ctx, timeout, func(ctx context.Context) (bool, error) {
		var ok bool
		var err error
		pods, ok, err = podsAre(ctx, c, ns, names, cond)
		return ok, err
	})
	if err != nil {
		return pods, fmt.Errorf("pods %v of %s: %w (%s)", names, ns, err, c.PodsSummary(ctx, ns, ""))
	}
	return pods, nil
}

// PodsAre reports whether every named pod of ns satisfies cond now.
func PodsAre(ctx context.Context, c *cluster.Cluster, ns string, names []string, cond func(*corev1.Pod) bool) (bool, error) {
	_, ok, err := podsAre(ctx, c, ns, names, cond)
	return ok, err
}

func podsAre(ctx context.Context, c *cluster.Cluster, ns string, names []string, cond func(*corev1.Pod) bool) ([]corev1.Pod, bool, error) {
	pods := make([]corev1.Pod, len(names))
	for i, n := range names {
		p, err := c.Client().CoreV1().Pods(ns).Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			return nil, false, err
		}
		pods[i] = *p
		if !cond(p) {
			return pods, false, nil
		}
	}
	return pods, true, nil
}

// DeleteSeed is `kubectl delete -f tfjob.yaml`, waiting until the
// workers are gone (their names are reused when it is created again).
func DeleteSeed(ctx context.Context, c *cluster.Cluster, ns string) error {
	if _, err := Kubectl(ctx, c, SeedTFJob, "delete", "-n", ns, "-f", "-"); err != nil {
		return err
	}
	return poll.Until(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		for _, n := range SeedWorkers {
			_, err := c.Client().CoreV1().Pods(ns).Get(ctx, n, metav1.GetOptions{})
			if !apierrors.IsNotFound(err) {
				return false, err
			}
		}
		return true, nil
	})
}
