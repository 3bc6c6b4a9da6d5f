package check

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/pkg/versions"
)

// matrix is where the README's compatibility matrix is.
const matrix = "https://github.com/istio-aux/istio-aux#compatibility"

// kubernetes checks the API server's version and every node's kubelet's
// against the range the suites prove (pkg/versions): outside it istio-aux
// may work, but nothing has shown that it does, so it warns. A kubelet's
// version also decides what an app's own restart policy means
// (pkg/decision.Kubelet), and whether Istio's auto mode gives native
// sidecars (every kubelet 1.33 or newer).
func (r *run) kubernetes() Item {
	v, err := r.Client.Discovery().ServerVersion()
	if err != nil {
		return warn(ItemKubernetes, fmt.Sprintf("reading the API server's version: %v", err), "kubectl version")
	}
	var outside []string
	if ok, err := versions.Proven(v.GitVersion); !ok || err != nil {
		outside = append(outside, "API server "+v.GitVersion)
	}
	nodes, err := r.Client.CoreV1().Nodes().List(r.ctx, metav1.ListOptions{})
	if err != nil {
		return warn(ItemKubernetes, fmt.Sprintf("API server %s; the kubelets' versions cannot be read (%v)", v.GitVersion, err), "kubectl get nodes")
	}
	count := map[string]int{}
	for _, n := range nodes.Items {
		kv := n.Status.NodeInfo.KubeletVersion
		count[kv]++
		if ok, err := versions.Proven(kv); !ok || err != nil {
			outside = append(outside, fmt.Sprintf("kubelet %s (node %s)", kv, n.Name))
		}
	}
	var kubelets []string
	for _, kv := range slices.Sorted(maps.Keys(count)) {
		kubelets = append(kubelets, fmt.Sprintf("%s ×%d", kv, count[kv]))
	}
	msg := fmt.Sprintf("API server %s, kubelets %s", v.GitVersion, strings.Join(kubelets, ", "))
	if len(nodes.Items) == 0 {
		msg = fmt.Sprintf("API server %s, no nodes", v.GitVersion)
	}
	if len(outside) > 0 {
		slices.Sort(outside)
		if len(outside) > 5 {
			outside = append(outside[:5], fmt.Sprintf("%d more", len(outside)-5))
		}
		return warn(ItemKubernetes, fmt.Sprintf("%s: %s outside the Kubernetes the suites prove (%s; %s)",
			msg, strings.Join(outside, ", "), versions.Range, matrix), "kubectl get nodes -o wide")
	}
	return ok(ItemKubernetes, fmt.Sprintf("%s: within the Kubernetes the suites prove (%s)", msg, versions.Range))
}
