package operators

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/poll"
)

// Kubectl runs the cluster's kubectl as its admin, with stdin, and returns
// its combined output.
func Kubectl(ctx context.Context, c *cluster.Cluster, stdin []byte, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, cluster.Kubectl(), append([]string{"--kubeconfig=" + c.Kubeconfig()}, args...)...)
	cmd.Stdin = bytes.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

// ApplyWhenServed applies manifests server-side, retrying for a minute
// while an operator's webhook is not reachable yet (its Deployment is
// Available a moment before kube-proxy routes its Service).
func ApplyWhenServed(ctx context.Context, c *cluster.Cluster, manifests []byte) error {
	return whenServed(ctx, c, manifests, "apply", "--server-side", "--field-manager=istio-aux-harness", "-f", "-")
}

// CreateWhenServed is `kubectl create -n ns -f -`, as a user submits a
// job, retried the same way.
func CreateWhenServed(ctx context.Context, c *cluster.Cluster, ns string, manifests []byte) error {
	return whenServed(ctx, c, manifests, "create", "-n", ns, "-f", "-")
}

// whenServed retries kubectl while it fails calling a webhook; any other
// error is final.
func whenServed(ctx context.Context, c *cluster.Cluster, stdin []byte, args ...string) error {
	var last error
	err := poll.Until(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		_, last = Kubectl(ctx, c, stdin, args...)
		if last != nil && strings.Contains(last.Error(), "failed calling webhook") {
			return false, nil
		}
		return true, last
	})
	if last != nil {
		return last
	}
	return err
}

// The kinds of the operators, as the dynamic client names them.
var (
	TFJobs      = schema.GroupVersionResource{Group: "kubeflow.org", Version: "v1", Resource: "tfjobs"}
	PyTorchJobs = schema.GroupVersionResource{Group: "kubeflow.org", Version: "v1", Resource: "pytorchjobs"}
	TrainJobs   = schema.GroupVersionResource{Group: "trainer.kubeflow.org", Version: "v1alpha1", Resource: "trainjobs"}
	JobSets     = schema.GroupVersionResource{Group: "jobset.x-k8s.io", Version: "v1alpha2", Resource: "jobsets"}
)

// Conditions are the True conditions of an object's status.conditions
// (every operator here writes metav1-style conditions), by type.
func Conditions(obj *unstructured.Unstructured) map[string]string {
	out := map[string]string{}
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, raw := range conds {
		m, ok := raw.(map[string]any)
		if !ok {
			continue
		}
		if m["status"] == "True" {
			typ, _ := m["type"].(string)
			reason, _ := m["reason"].(string)
			out[typ] = reason
		}
	}
	return out
}

// WaitCondition waits until the object has the condition typ True and
// returns the object; the error names its conditions as they were last.
func WaitCondition(ctx context.Context, c *cluster.Cluster, gvr schema.GroupVersionResource, ns, name, typ string, timeout time.Duration) (*unstructured.Unstructured, error) {
	var last *unstructured.Unstructured
	err := poll.Until(ctx, timeout, func(ctx context.Context) (bool, error) {
		obj, err := Get(ctx, c, gvr, ns, name)
		if err != nil {
			return false, err
		}
		last = obj
		_, ok := Conditions(obj)[typ]
		return ok, nil
	})
	if err != nil {
		var conds any
		if last != nil {
			conds, _, _ = unstructured.NestedSlice(last.Object, "status", "conditions")
		}
		return last, fmt.Errorf("%s %s/%s not %s: %w (conditions %v; pods: %s)", gvr.Resource, ns, name, typ, err, conds,
			c.PodsSummary(ctx, ns, ""))
	}
	return last, nil
}

// Get reads one object of an operator's kind.
func Get(ctx context.Context, c *cluster.Cluster, gvr schema.GroupVersionResource, ns, name string) (*unstructured.Unstructured, error) {
	dyn, err := dynamic.NewForConfig(c.RESTConfig())
	if err != nil {
		return nil, err
	}
	return dyn.Resource(gvr).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
}
