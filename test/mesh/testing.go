package mesh

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/images"
	"github.com/istio-aux/istio-aux/test/poll"
)

// The suites' helpers: each fails its test when the cluster does not answer
// or the wait ends, and says what it last saw. Every suite (kwok, one real
// node, three) uses these; none has its own.

// NameFor is a namespace name for the test t: its name lower-cased, with
// "/" and "_" as "-", then suffix, keeping the last 63 characters (a
// subtest's own part is at the end).
func NameFor(t testing.TB, suffix string) string {
	name := strings.NewReplacer("/", "-", "_", "-").Replace(strings.ToLower(t.Name())) + suffix
	if len(name) > 63 {
		name = strings.TrimLeft(name[len(name)-63:], "-")
	}
	return name
}

// Namespace creates a namespace for the test, named after it (NameFor),
// with Istio's injection on if injected, and labels (OptedIn, or nil).
func Namespace(t testing.TB, c *cluster.Cluster, suffix string, injected bool, labels map[string]string) string {
	t.Helper()
	name := NameFor(t, suffix)
	create := CreatePlainNamespace
	if injected {
		create = CreateNamespace
	}
	if err := create(context.Background(), c.Client(), name, labels); err != nil {
		t.Fatal(err)
	}
	return name
}

// Relabel merges labels into the namespace's (a nil value removes the key)
// until the test ends, then puts back what it had.
func Relabel(t testing.TB, c *cluster.Cluster, ns string, labels map[string]any) {
	t.Helper()
	ctx := context.Background()
	nss := c.Client().CoreV1().Namespaces()
	old, err := nss.Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before := map[string]any{}
	for k := range labels {
		if v, ok := old.Labels[k]; ok {
			before[k] = v
		} else {
			before[k] = nil
		}
	}
	patch := func(l map[string]any) error {
		raw, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": l}})
		if err == nil {
			_, err = nss.Patch(context.Background(), ns, types.MergePatchType, raw, metav1.PatchOptions{})
		}
		return err
	}
	if err := patch(labels); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := patch(before); err != nil {
			t.Errorf("restoring the labels of namespace %s: %v", ns, err)
		}
	})
}

// CreateJob creates the Job in ns.
func CreateJob(t testing.TB, c *cluster.Cluster, ns string, j *batchv1.Job) {
	t.Helper()
	if _, err := c.Client().BatchV1().Jobs(ns).Create(context.Background(), j, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// Pods are the Job's pods now.
func Pods(t testing.TB, c *cluster.Cluster, ns, job string) []corev1.Pod {
	t.Helper()
	pods, err := JobPods(context.Background(), c.Client(), ns, job)
	if err != nil {
		t.Fatal(err)
	}
	return pods
}

// WaitPods waits until the Job has n pods and cond holds for each, and
// returns them. A Job's pods are made one by one after it is created: its
// pods listed at once may be fewer than its parallelism.
func WaitPods(t testing.TB, c *cluster.Cluster, ns, job string, n int, timeout time.Duration, cond func(*corev1.Pod) bool) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	err := poll.Until(context.Background(), timeout, func(ctx context.Context) (bool, error) {
		var err error
		if pods, err = JobPods(ctx, c.Client(), ns, job); err != nil || len(pods) != n {
			return false, err
		}
		for i := range pods {
			if !cond(&pods[i]) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("job %s/%s: want %d pods that hold the condition: %v (pods: %s)", ns, job, n, err, PodStates(pods))
	}
	return pods
}

// OnlyPod is the Job's one pod.
func OnlyPod(t testing.TB, c *cluster.Cluster, ns, job string) corev1.Pod {
	t.Helper()
	pods := Pods(t, c, ns, job)
	if len(pods) != 1 {
		t.Fatalf("job %s: %d pods, want 1", job, len(pods))
	}
	return pods[0]
}

// WaitJob waits for the Job's condition (Complete or Failed).
func WaitJob(t testing.TB, c *cluster.Cluster, ns, name string, cond batchv1.JobConditionType, timeout time.Duration) *batchv1.Job {
	t.Helper()
	return waitJob(t, c, ns, name, timeout, cond)
}

// WaitJobEnd waits for the Job to end, Complete or Failed, and returns
// it: for a test that records what became of every Job before its verdict.
func WaitJobEnd(t testing.TB, c *cluster.Cluster, ns, name string, timeout time.Duration) *batchv1.Job {
	t.Helper()
	return waitJob(t, c, ns, name, timeout, batchv1.JobComplete, batchv1.JobFailed)
}

// waitJob waits until the Job has one of the conditions, or fails the test.
func waitJob(t testing.TB, c *cluster.Cluster, ns, name string, timeout time.Duration, conds ...batchv1.JobConditionType) *batchv1.Job {
	t.Helper()
	last := &batchv1.Job{}
	err := poll.Until(context.Background(), timeout, func(ctx context.Context) (bool, error) {
		j, err := c.Client().BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = j
		return slices.ContainsFunc(conds, func(cond batchv1.JobConditionType) bool { return JobHas(j, cond) }), nil
	})
	if err != nil {
		what := make([]string, len(conds))
		for i, cond := range conds {
			what[i] = string(cond)
		}
		t.Fatalf("job %s/%s not %s: %v; status %+v; pods: %s", ns, name, strings.Join(what, " or "), err, last.Status, PodStates(Pods(t, c, ns, name)))
	}
	return last
}

// PodStates is each pod's phase and containers' states, for a failure
// message.
func PodStates(pods []corev1.Pod) string {
	states := make([]string, len(pods))
	for i, p := range pods {
		states[i] = p.Name + ": " + string(p.Status.Phase) + " " + Describe(p.Status.ContainerStatuses)
	}
	return strings.Join(states, "; ")
}

// WaitPod waits until cond holds on the live pod, and returns it.
func WaitPod(t testing.TB, c *cluster.Cluster, ns, name string, timeout time.Duration, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	check, last := podCheck(c, ns, name, cond)
	if err := poll.Until(context.Background(), timeout, check); err != nil {
		t.Fatalf("pod %s/%s: %v%s", ns, name, err, lastStatus(*last))
	}
	return *last
}

// PodStays checks that cond holds on the live pod for the whole period:
// the pod must not move on by itself.
func PodStays(t testing.TB, c *cluster.Cluster, ns, name string, period time.Duration, what string, cond func(*corev1.Pod) bool) {
	t.Helper()
	check, last := podCheck(c, ns, name, cond)
	if err := poll.While(context.Background(), period, check); err != nil {
		t.Fatalf("pod %s/%s: %s: %v%s", ns, name, what, err, lastStatus(*last))
	}
}

// podCheck is a poll condition: cond on the live pod, which it keeps in
// *last for the failure message.
func podCheck(c *cluster.Cluster, ns, name string, cond func(*corev1.Pod) bool) (poll.Cond, **corev1.Pod) {
	last := new(*corev1.Pod)
	return func(ctx context.Context) (bool, error) {
		p, err := c.Client().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		*last = p
		return cond(p), nil
	}, last
}

func lastStatus(p *corev1.Pod) string {
	if p == nil {
		return ""
	}
	return fmt.Sprintf("; last status: phase %s on %q, init %s, containers %s",
		p.Status.Phase, p.Spec.NodeName, Describe(p.Status.InitContainerStatuses), Describe(p.Status.ContainerStatuses))
}

// Describe is the containers' states in a line.
func Describe(ss []corev1.ContainerStatus) string {
	var parts []string
	for _, s := range ss {
		state := "waiting"
		switch {
		case s.State.Running != nil:
			state = "running"
		case s.State.Terminated != nil:
			state = fmt.Sprintf("terminated(%d,%s)", s.State.Terminated.ExitCode, s.State.Terminated.Reason)
		case s.State.Waiting != nil:
			state = "waiting(" + s.State.Waiting.Reason + ")"
		}
		parts = append(parts, fmt.Sprintf("%s=%s restarts=%d ready=%t", s.Name, state, s.RestartCount, s.Ready))
	}
	return strings.Join(parts, ", ")
}

// ContainerNames are the pod's containers in order, init ones first.
func ContainerNames(p *corev1.Pod) []string {
	var out []string
	for _, c := range p.Spec.InitContainers {
		out = append(out, "init:"+c.Name)
	}
	for _, c := range p.Spec.Containers {
		out = append(out, c.Name)
	}
	return out
}

// Events are the Kubernetes Events on a pod.
func Events(t testing.TB, c *cluster.Cluster, ns, pod string) []corev1.Event {
	t.Helper()
	l, err := c.Client().CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// CountEvents is how many times the reason happened (an Event's count).
func CountEvents(evs []corev1.Event, reason string) int32 {
	var n int32
	for _, e := range evs {
		if e.Reason == reason {
			n += max(e.Count, 1)
		}
	}
	return n
}

// WaitEvent waits until the pod has an Event with the reason.
func WaitEvent(t testing.TB, c *cluster.Cluster, ns, pod, reason string) {
	t.Helper()
	poll.Eventually(t, 30*time.Second, reason+" Event on "+ns+"/"+pod, func(context.Context) (bool, error) {
		evs := Events(t, c, ns, pod)
		if CountEvents(evs, reason) > 0 {
			return true, nil
		}
		// What the pod has instead says why (a ProxyQuitFailed, no Event).
		seen := make([]string, 0, len(evs))
		for _, e := range evs {
			seen = append(seen, e.Reason+": "+e.Message)
		}
		return false, fmt.Errorf("the pod's Events: %q", seen)
	})
}

// OneEvent checks that pod has exactly one Event of reason, once it has
// one: a quit's Event may land a moment after its Job completes (the proxy
// exits before the function writes it), so the first is waited for.
func OneEvent(t testing.TB, c *cluster.Cluster, ns, pod, reason string) {
	t.Helper()
	WaitEvent(t, c, ns, pod, reason)
	if n := CountEvents(Events(t, c, ns, pod), reason); n != 1 {
		t.Errorf("%s/%s: %d %s Events, want exactly 1", ns, pod, n, reason)
	}
}

// Stuck is what the pod of a Job istio-aux leaves alone looks like: its
// app container has terminated, istio-proxy still runs, so the pod stays
// Running and the Job never completes.
func Stuck(p *corev1.Pod, app string) bool {
	return p.Status.Phase == corev1.PodRunning &&
		cluster.ContainerStatus(p, app).State.Terminated != nil &&
		cluster.ContainerStatus(p, keys.ProxyContainer).State.Running != nil
}

// StuckDone is Stuck with the app's last attempt having exited 0: the
// training is over, only the proxy keeps the pod.
func StuckDone(p *corev1.Pod, app string) bool {
	return Stuck(p, app) && cluster.ContainerStatus(p, app).State.Terminated.ExitCode == 0
}

// ProxyFirstWithHold reports whether Istio injected istio-proxy as the
// first container with the postStart `pilot-agent wait`: what the hold
// asks for.
func ProxyFirstWithHold(p *corev1.Pod) bool {
	if len(p.Spec.Containers) == 0 || p.Spec.Containers[0].Name != keys.ProxyContainer {
		return false
	}
	h := p.Spec.Containers[0].Lifecycle
	return h != nil && h.PostStart != nil && h.PostStart.Exec != nil &&
		strings.Join(h.PostStart.Exec.Command, " ") == "pilot-agent wait"
}

// Pod is a pod of the given containers on node (any if ""), with a short
// grace period.
func Pod(ns, name, node string, policy corev1.RestartPolicy, containers ...corev1.Container) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			RestartPolicy:                 policy,
			TerminationGracePeriodSeconds: ptr.To(int64(5)),
			Containers:                    containers,
		},
	}
	if node != "" {
		p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
	}
	return p
}

// CreatePod creates the pod.
func CreatePod(t testing.TB, c *cluster.Cluster, p *corev1.Pod) {
	t.Helper()
	if _, err := c.Client().CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// Web runs the test app's web server (:8080) in a pod on each node given
// ("web-<node>"; with none, one pod "web" anywhere), with the Service "web"
// (port 80) over them; it waits until each is Ready on its node and returns
// their addresses by node ("" for the one pod).
func Web(t testing.TB, c *cluster.Cluster, ns string, nodes ...string) map[string]string {
	t.Helper()
	if len(nodes) == 0 {
		nodes = []string{""}
	}
	name := func(node string) string { return strings.TrimSuffix("web-"+node, "-") }
	for _, n := range nodes {
		p := Pod(ns, name(n), n, corev1.RestartPolicyAlways, corev1.Container{
			Name: "web", Image: images.AppRef, Args: []string{"serve", ":8080"},
			ReadinessProbe: &corev1.Probe{PeriodSeconds: 1,
				ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(8080)}}},
		})
		p.Labels = map[string]string{"app": "web"}
		CreatePod(t, c, p)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
	if _, err := c.Client().CoreV1().Services(ns).Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ips := map[string]string{}
	for _, n := range nodes {
		p := WaitPod(t, c, ns, name(n), 2*time.Minute, cluster.PodReady)
		if n != "" && p.Spec.NodeName != n {
			t.Fatalf("%s runs on %s", p.Name, p.Spec.NodeName)
		}
		ips[n] = p.Status.PodIP
	}
	return ips
}

// Probe has the test app reach every target (a URL, or host:port) from a
// pod "client" on node (any if "") and returns its log; the test fails
// unless each answered.
func Probe(t testing.TB, c *cluster.Cluster, ns, node string, targets ...string) string {
	t.Helper()
	CreatePod(t, c, Pod(ns, "client", node, corev1.RestartPolicyNever, corev1.Container{
		Name: "client", Image: images.AppRef, Args: append([]string{"probe"}, targets...)}))
	p := WaitPod(t, c, ns, "client", 2*time.Minute, func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
	})
	out, err := c.Client().CoreV1().Pods(ns).GetLogs("client", &corev1.PodLogOptions{}).DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if p.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("from %q, not every target answered:\n%s", p.Spec.NodeName, out)
	}
	for _, target := range targets {
		if !strings.Contains(string(out), "probe "+target+": ok") {
			t.Errorf("no success for %s in:\n%s", target, out)
		}
	}
	return string(out)
}
