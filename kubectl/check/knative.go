package check

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/istio-aux/istio-aux/pkg/names"
)

// What the promise "quits resume within 30 s of a node's loss" needs of
// Knative (docs/design.md, "The Knative path under node loss"): two ready
// pods of the function, on two nodes, kept there by a hard spread.
const (
	knativeNamespace = "knative-serving"
	minScaleKey      = "autoscaling.knative.dev/min-scale"
	spreadFlag       = "kubernetes.podspec-topologyspreadconstraints"
	hostnameKey      = corev1.LabelHostname
)

// knativeSettings names what functionNodeLoss reads, for its message.
var knativeSettings = "the Service's " + minScaleKey + " (else config-autoscaler min-scale), its topologySpreadConstraints or required podAntiAffinity on " +
	hostnameKey + ", config-features " + spreadFlag + ", and where its ready pods run"

// functionNodeLoss warns when the function's Knative Service would stop
// quits for minutes if a node died: fewer than two pods, pods free to share
// a node, or ready pods on one node now.
func (r *run) functionNodeLoss() Item {
	var problems []string
	var tmpl struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
		Spec     corev1.PodSpec    `json:"spec"`
	}
	raw, _, _ := unstructured.NestedMap(r.ksvc.Object, "spec", "template")
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &tmpl); err != nil {
		return warn(ItemFunctionNodeLoss, fmt.Sprintf("reading the Service's template: %v", err), r.kubectl("get ksvc "+names.FunctionService+" -o yaml"))
	}

	minScale, from := tmpl.Metadata.Annotations[minScaleKey], "the Service's "+minScaleKey
	if minScale == "" {
		v, err := r.knativeConfig("config-autoscaler", "min-scale")
		if err != nil {
			problems = append(problems, err.Error())
		}
		minScale, from = cmp.Or(v, "0"), "config-autoscaler min-scale"
	}
	if n, err := strconv.Atoi(minScale); err != nil || n < 2 {
		problems = append(problems, fmt.Sprintf("min-scale %s (%s): a lone pod's node lost stops quits until its eviction, about 6 minutes; set %s: \"2\"",
			minScale, from, minScaleKey))
	}

	if !spreadByHost(tmpl.Spec) {
		flag, err := r.knativeConfig("config-features", spreadFlag)
		switch {
		case err != nil:
			problems = append(problems, err.Error())
		case flag != "enabled" && flag != "allowed":
			problems = append(problems, fmt.Sprintf("config-features %s is %q, and the Service has no spread: its pods may share a node; enable the flag and spread them by %s (docs/install.md)",
				spreadFlag, cmp.Or(flag, "disabled"), hostnameKey))
		default:
			problems = append(problems, fmt.Sprintf("the Service has no topologySpreadConstraints on %s with whenUnsatisfiable DoNotSchedule: its pods may share a node (docs/install.md)", hostnameKey))
		}
	}

	pods, err := r.Client.CoreV1().Pods(r.SystemNamespace).List(r.ctx, metav1.ListOptions{LabelSelector: "serving.knative.dev/service=" + names.FunctionService})
	nodes := map[string]bool{}
	if err != nil {
		problems = append(problems, fmt.Sprintf("listing the function's pods: %v", err))
	} else {
		for i := range pods.Items {
			if p := &pods.Items[i]; podReady(p) && p.Spec.NodeName != "" {
				nodes[p.Spec.NodeName] = true
			}
		}
		if len(nodes) < 2 {
			problems = append(problems, fmt.Sprintf("its ready pods run on %d node(s) now", len(nodes)))
		}
	}
	if len(problems) > 0 {
		return warn(ItemFunctionNodeLoss, "a node's loss would stop quits for minutes: "+strings.Join(problems, "; ")+" (checked: "+knativeSettings+")",
			r.kubectl("get ksvc "+names.FunctionService+" -o yaml"))
	}
	return ok(ItemFunctionNodeLoss, fmt.Sprintf("min-scale %s, spread by %s, ready pods on %d nodes (checked: %s)", minScale, hostnameKey, len(nodes), knativeSettings))
}

// spreadByHost reports a hard spread of the pods over nodes: a topology
// spread on the hostname that does not schedule past its skew, or a
// required anti-affinity on it.
func spreadByHost(spec corev1.PodSpec) bool {
	for _, c := range spec.TopologySpreadConstraints {
		if c.TopologyKey == hostnameKey && c.WhenUnsatisfiable == corev1.DoNotSchedule {
			return true
		}
	}
	if a := spec.Affinity; a != nil && a.PodAntiAffinity != nil {
		for _, t := range a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
			if t.TopologyKey == hostnameKey {
				return true
			}
		}
	}
	return false
}

// knativeConfig reads a key of a Knative Serving ConfigMap: "" when the
// ConfigMap or the key is absent (Knative's default then applies).
func (r *run) knativeConfig(name, key string) (string, error) {
	cm, err := r.Client.CoreV1().ConfigMaps(knativeNamespace).Get(r.ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("cannot read %s/%s: %w", knativeNamespace, name, err)
	}
	return cm.Data[key], nil
}
