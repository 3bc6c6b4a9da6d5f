package mesh

import (
	"fmt"
	"strings"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/istio"
	"github.com/istio-aux/istio-aux/test/knative"
)

// The shapes of cluster the suites run besides their own default one, each
// a cell of the README's compatibility matrix, and named in the tests that
// run it (test/node's TestV132, test/ha's TestV133Mixed...). What a shape
// varies is what users run differently: the control plane's version, each
// node's kubelet, and what Istio then does. Every scenario is written once
// and run on each shape it belongs to.
var (
	// V132 is one node of Kubernetes 1.32 (EKS and AKS's long-term support)
	// with istiod's own default, ENABLE_NATIVE_SIDECARS=auto (Istio 1.27 and
	// newer), which gives every pod a classic sidecar there: the kubelet is
	// older than 1.33. The function is config/'s Knative Service, on the
	// Knative Serving release that starts there (knative.R117).
	V132 = Options{Kubernetes: cluster.K8sV132, NativeSidecars: "auto", Knative: true}
	// V131 is one node of Kubernetes 1.31, OpenShift 4.18's (supported to
	// 2027-02-25), with istiod's default: classic sidecars there. The
	// function is a Knative Service, on Knative Serving 1.17, OpenShift
	// Serverless 1.37's release.
	V131 = Options{Kubernetes: cluster.K8sV131, NativeSidecars: "auto", Knative: true}
	// V132Istio124 is V132 with Istio 1.24 (OpenShift Service Mesh 3.0),
	// classic by default.
	V132Istio124 = Options{Kubernetes: cluster.K8sV132, Istio: istio.R124, NativeSidecars: "false"}
	// V133 is one node of Kubernetes 1.33 with Istio 1.26 (OpenShift
	// Service Mesh 3.1), classic by default: Istio's auto, from 1.27, would
	// make every sidecar native on a kubelet of 1.33.
	V133 = Options{Kubernetes: cluster.K8sV133, Istio: istio.R126, NativeSidecars: "false"}
	// V133Istio127 is one node of Kubernetes 1.33 with Istio 1.27's auto:
	// every kubelet is 1.33 or newer, so every sidecar is native, which the
	// kubelet starts first and stops last; istio-aux stays out of the way.
	V133Istio127 = Options{Kubernetes: cluster.K8sV133, Istio: istio.R127, NativeSidecars: "auto"}
	// V133Mixed is a cluster in the middle of an upgrade: the control plane
	// and one node at 1.33, two nodes still at 1.32 (within Kubernetes'
	// skew policy). istiod's auto then keeps every sidecar classic, on the
	// 1.33 node too: one older kubelet is enough.
	V133Mixed = Options{Kubernetes: cluster.K8sV133, Nodes: 3,
		Kubelets: []string{cluster.K8sV133, cluster.K8sV132, cluster.K8sV132}, NativeSidecars: "auto"}
	// HAKnative is the three-node cluster of the newest version with
	// Knative Serving installed: the function as config/ ships it, a
	// Knative Service, rather than the Deployment Knative would make.
	HAKnative = Options{Nodes: 3, Knative: true}
	// HACNI is the three-node cluster of the newest version with Istio CNI
	// (test/ha's TestHACNIStartRace: a node powered off and on).
	HACNI = Options{Nodes: 3, CNI: true}
	// CNI is one node of the newest version with Istio's CNI node agent
	// (the istio-cni plugin chained into the node's network, as hardened
	// and managed meshes run it): pods get istio-validation instead of
	// istio-init, and their traffic goes through the proxy.
	CNI = Options{CNI: true}
	// V132Istio128CNI is one node of the oldest version with Istio 1.28
	// (OpenShift Service Mesh 3.3's minor) and its CNI node agent: the
	// CNI shape on the oldest cluster, auto keeping sidecars classic.
	V132Istio128CNI = Options{Kubernetes: cluster.K8sV132, Istio: istio.R128, CNI: true, NativeSidecars: "auto"}
	// Canary is one node of the newest version with Istio 1.30 installed by
	// revision (OpenShift Service Mesh 3.x's naming) and its default tag,
	// classic sidecars, upgraded to 1.31 (CanaryTo) by test/node's
	// TestCanaryUpgrade.
	Canary = Options{Istio: istio.R130, Revision: "default-v1-30", NativeSidecars: "false"}
	// OpenShift is OpenShift Service Mesh 3.2 (Istio 1.27) on OpenShift
	// 4.18 (Kubernetes 1.31, supported to 2027-02-25; 4.19 is 1.32) as far
	// as it can run here: istiod with the
	// OpenShift profile installed by revision (OSSM's name for it) with its
	// default tag, Istio CNI, and the OpenShift stand-in (UID ranges,
	// restricted-v2, Pod Security restricted). Its kubelets are older than
	// 1.33, so Istio's auto keeps sidecars classic.
	OpenShift = Options{Kubernetes: cluster.K8sV131, Istio: istio.R127, Revision: "default-v1-27-9", CNI: true,
		Platform: "openshift", NativeSidecars: "auto"}
	// V133MixedIstio127 is V133Mixed with Istio 1.27 (OpenShift Service
	// Mesh 3.2's), the first release whose default is auto.
	V133MixedIstio127 = Options{Kubernetes: cluster.K8sV133, Nodes: 3, Istio: istio.R127,
		Kubelets: []string{cluster.K8sV133, cluster.K8sV132, cluster.K8sV132}, NativeSidecars: "auto"}
)

// The canary upgrade's target: the release and the revision it is
// installed as beside Canary's.
var (
	CanaryTo       = istio.R131
	CanaryRevision = "default-v1-31-0"
)

// ShapeOf names o's shape in words: its control plane's version, each
// node's kubelet where it differs, and istiod's native-sidecar setting.
func ShapeOf(o Options) string {
	cp := o.Kubernetes
	if cp == "" {
		cp = cluster.K8sVersion
	}
	nodes := max(o.Nodes, 1)
	kubelets := make([]string, nodes)
	for i := range kubelets {
		kubelets[i] = cp
		if i < len(o.Kubelets) && o.Kubelets[i] != "" {
			kubelets[i] = o.Kubelets[i]
		}
	}
	native := o.NativeSidecars
	if native == "" {
		native = "false"
	}
	shape := fmt.Sprintf("Kubernetes %s, %d node(s) with kubelets %s, Istio %s with ENABLE_NATIVE_SIDECARS=%s", cp, nodes, strings.Join(kubelets, ","), o.Istio, native)
	if o.CNI {
		shape += ", Istio CNI"
	}
	if o.Revision != "" {
		shape += fmt.Sprintf(", revision %s tagged %s", o.Revision, DefaultTag)
	}
	if o.Platform != "" {
		shape += ", platform " + o.Platform
	}
	if r, ok := knative.For(cp); o.Knative && ok {
		shape += ", Knative Serving " + r.String()
	}
	return shape
}
