package main

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/istio"
	"github.com/istio-aux/istio-aux/test/mesh"
)

// format is what a folder holds.
type format string

const (
	// bridgeFormat: the events the bridge published (dev.istio-aux.pod.updated).
	bridgeFormat format = "bridge"
	// apiServerSourceFormat: every add/update/delete a Knative
	// ApiServerSource (Resource mode) would have delivered for the pods.
	apiServerSourceFormat format = "apiserversource"
)

// annotationStagedStart makes kwok start the pod step by step
// (test/kwok/pod-staged-start.yaml).
const annotationStagedStart = "test.istio-aux.dev/staged-start"

// scenario is one namespace of pods run to their end and the folders
// recorded from it.
type scenario struct {
	namespace string
	what      string // one line for the SOURCE files
	nsLabels  map[string]string
	pods      []*corev1.Pod
	folders   map[string]format
	// deleteRunning deletes every pod once all its apps run (deleted-mid-run).
	deleteRunning bool
	// node records it on the real node (a real kubelet), not on kwok.
	node bool
}

var optedIn = map[string]string{keys.LabelEnabled: "true"}

func scenarios() []scenario {
	return []scenario{
		{
			namespace: "tfjob-mnist-2-workers",
			what: "the reference demo: TFJob mnist's 2 workers (pods as the training operator creates them, " +
				"restartPolicy OnFailure, one tensorflow container running 3s), namespace opted in with the " +
				"reference's label io.datastrophic/istio-aux=enabled; kwok's staged start (Init, PodInitializing, 1/2, 2/2)",
			nsLabels: map[string]string{keys.LegacyLabel: keys.LegacyLabelValue},
			pods:     []*corev1.Pod{mnistWorker(0), mnistWorker(1)},
			folders: map[string]format{
				"tfjob-mnist-2-workers": bridgeFormat,
				"apiserversource":       apiServerSourceFormat,
			},
		},
		{
			namespace: "onfailure-retry",
			what:      "restartPolicy OnFailure, the app's first attempt exits 1 (the kubelet restarts it), the second exits 0",
			nsLabels:  optedIn,
			pods: []*corev1.Pod{pod("download", corev1.RestartPolicyOnFailure,
				map[string]string{cluster.AnnotationRunFor: "2s", cluster.AnnotationExitCodes: "1,0"}, "download")},
			folders: map[string]format{"onfailure-retry": bridgeFormat},
		},
		{
			namespace: "never-failing-app",
			what:      "restartPolicy Never, the app exits 1",
			nsLabels:  optedIn,
			pods: []*corev1.Pod{pod("migrate-db", corev1.RestartPolicyNever,
				map[string]string{cluster.AnnotationRunFor: "2s", cluster.AnnotationExitCodes: "1"}, "migrate")},
			folders: map[string]format{"never-failing-app": bridgeFormat},
		},
		{
			namespace: "two-apps",
			what:      "restartPolicy Never, two apps: trainer exits 0 after 2s, uploader exits 0 after 5s",
			nsLabels:  optedIn,
			pods: []*corev1.Pod{pod("report", corev1.RestartPolicyNever,
				map[string]string{cluster.AnnotationRunFor: "trainer=2s,uploader=5s"}, "trainer", "uploader")},
			folders: map[string]format{"two-apps": bridgeFormat},
		},
		{
			namespace: "native-sidecar",
			what: "sidecar.istio.io/nativeSidecar: \"true\": istio-proxy is an init container with restartPolicy " +
				"Always that the kubelet stops; the bridge publishes nothing for it, so ApiServerSource events",
			nsLabels: optedIn,
			pods: []*corev1.Pod{pod("native", corev1.RestartPolicyNever,
				map[string]string{cluster.AnnotationRunFor: "2s", "sidecar.istio.io/nativeSidecar": "true"}, "app")},
			folders: map[string]format{"native-sidecar": apiServerSourceFormat},
		},
		// Container-level restart policy and rules (Kubernetes 1.35+), which
		// only a real kubelet decides: recorded on the real node.
		{
			namespace: "container-onfailure-retry",
			what: "restartPolicy Never, but the app container's own restartPolicy is OnFailure; its first " +
				"attempt exits 1, the kubelet runs it again, the second exits 0 (real node)",
			nsLabels: optedIn, node: true,
			pods: []*corev1.Pod{nodePod("retry", corev1.RestartPolicyNever, mesh.App{ExitCodes: []int{1, 0}},
				func(c *corev1.Container) { c.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyOnFailure) })},
			folders: map[string]format{"container-onfailure-retry": bridgeFormat},
		},
		{
			namespace: "restart-rule-exit-42",
			what: "restartPolicy Never, the app container restartPolicy Never with a rule Restart on exit code In [42]; " +
				"its first attempt exits 42, the kubelet runs it again, the second exits 0 (real node)",
			nsLabels: optedIn, node: true,
			pods: []*corev1.Pod{nodePod("rule", corev1.RestartPolicyNever, mesh.App{ExitCodes: []int{42, 0}},
				func(c *corev1.Container) {
					c.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyNever)
					c.RestartPolicyRules = []corev1.ContainerRestartRule{{Action: corev1.ContainerRestartRuleActionRestart,
						ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}
				})},
			folders: map[string]format{"restart-rule-exit-42": bridgeFormat},
		},
		{
			namespace: "container-never-failure",
			what: "restartPolicy OnFailure, but the app container's own restartPolicy is Never; it exits 1 " +
				"and the kubelet will not run it again (real node)",
			nsLabels: optedIn, node: true,
			pods: []*corev1.Pod{nodePod("once", corev1.RestartPolicyOnFailure, mesh.App{ExitCodes: []int{1}},
				func(c *corev1.Container) { c.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyNever) })},
			folders: map[string]format{"container-never-failure": bridgeFormat},
		},
		{
			namespace: "deleted-mid-run",
			what: "restartPolicy Never, the app would run 60s but the pod is deleted once it runs " +
				"(containers killed with 137, pod Failed, then gone); ApiServerSource events, delete included",
			nsLabels: optedIn,
			pods: []*corev1.Pod{pod("sleeper", corev1.RestartPolicyNever,
				map[string]string{cluster.AnnotationRunFor: "60s"}, "app")},
			folders:       map[string]format{"deleted-mid-run": apiServerSourceFormat},
			deleteRunning: true,
		},
	}
}

func pod(name string, policy corev1.RestartPolicy, annotations map[string]string, apps ...string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations, Labels: map[string]string{"app": name}},
		// serviceAccountName: what a real cluster's ServiceAccount admission
		// plugin sets, and istiod's injected token volume needs.
		Spec: corev1.PodSpec{RestartPolicy: policy, ServiceAccountName: istio.ServiceAccount},
	}
	for _, a := range apps {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: a, Image: "registry.example/" + a + ":1"})
	}
	return p
}

// mnistWorker is a TFJob worker pod the way the Kubeflow training operator
// creates it. The harness's istiod injects no istio-init (iptables) init
// container (interceptionMode NONE, see test/istio), which a mesh without
// the CNI plugin has, so the pod carries it itself: it is what makes kubectl
// show Init:0/1 first.
func mnistWorker(i int) *corev1.Pod {
	idx := string(rune('0' + i))
	p := pod("mnist-worker-"+idx, corev1.RestartPolicyOnFailure,
		map[string]string{cluster.AnnotationRunFor: "3s", annotationStagedStart: "true"}, "tensorflow")
	p.Labels = map[string]string{
		"training.kubeflow.org/job-name":      "mnist",
		"training.kubeflow.org/replica-type":  "worker",
		"training.kubeflow.org/replica-index": idx,
		"training.kubeflow.org/operator-name": "tfjob-controller",
	}
	p.Spec.Containers[0].Image = "kubeflow/tf-mnist-with-summaries:latest"
	p.Spec.Containers[0].Command = []string{"python", "-u", "mnist.py"}
	p.Spec.InitContainers = []corev1.Container{{
		Name: "istio-init", Image: istio.ProxyImage,
		Args: []string{"istio-iptables", "-p", "15001", "-z", "15006", "-u", "1337", "-m", "REDIRECT", "-i", "*", "-b", "*", "-d", "15090,15021,15020"},
	}}
	return p
}

// nodePod is a pod for the real node: the training app (test/cmd/app) as
// mesh builds it, changed by mod.
func nodePod(name string, policy corev1.RestartPolicy, app mesh.App, mod func(*corev1.Container)) *corev1.Pod {
	t := mesh.TrainingJob(name, 1, policy, app, nil).Spec.Template
	mod(&t.Spec.Containers[0])
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}, Annotations: t.Annotations}, Spec: t.Spec}
}
