package watch

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"

	"github.com/istio-aux/istio-aux/bridge/metrics"
	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/pkg/slim"
)

// The API server's limits on what a pod's owner writes
// (k8s.io/apimachinery validation): a pod name is a DNS subdomain, a
// container name and a label value at most 63 characters, and all
// annotations together at most 256 KiB.
const (
	maxPodName     = 253
	maxName        = 63
	maxAnnotations = 256 << 10
)

// name is a name of n characters unique to pod i and a container j.
func name(n, i, j int) string {
	s := fmt.Sprintf("x%d-%d-", i, j)
	return s + strings.Repeat("y", n-len(s))
}

// worstPod is a pod its owner wrote as large as the API takes it where
// the cache might keep it: the longest pod name, labels and annotations to
// the limit (the sidecars annotation most of it, naming sidecars the
// first slim.MaxSidecars of which are containers; the opt-in annotation
// the rest), apps and init containers of the longest names, unique to the
// pod, each with slim.MaxRules rules of slim.MaxExitCodes exit codes
// (rules, shared between the pods), exited with a code a rule matches.
// apps is how many apps besides the proxy.
func worstPod(i, apps int, rules []corev1.ContainerRestartRule, metadata bool) *corev1.Pod {
	onFailure := corev1.ContainerRestartPolicyOnFailure
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name(maxPodName, i, 0), Namespace: "tenant",
			UID: types.UID(fmt.Sprintf("%08d-0000-4000-8000-000000000000", i)), ResourceVersion: fmt.Sprint(1<<62 + i),
			Labels: map[string]string{keys.LabelWatched: "true"}},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: keys.ProxyContainer}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
			{Name: keys.ProxyContainer, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}},
	}
	exited := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 3, Reason: strings.Repeat("r", 1024)}}
	var sidecars []string
	for j := range apps {
		c := corev1.Container{Name: name(maxName, i, j), RestartPolicy: &onFailure, RestartPolicyRules: rules}
		p.Spec.Containers = append(p.Spec.Containers, c)
		p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: name(maxName, i, 1000+j), RestartPolicyRules: rules})
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, RestartCount: 7, State: exited})
		p.Status.InitContainerStatuses = append(p.Status.InitContainerStatuses, corev1.ContainerStatus{Name: name(maxName, i, 1000+j), State: exited})
		if j < slim.MaxSidecars {
			sidecars = append(sidecars, c.Name)
		}
	}
	if !metadata {
		return p
	}
	for j := range 64 {
		p.Labels[name(maxName, i, j)] = name(maxName, i, j)
	}
	p.Labels[keys.LabelEnabled] = "true"
	sidecarsValue := strings.Join(sidecars, ",") + "," + strings.Repeat("n", maxAnnotations/2)
	p.Annotations = map[string]string{
		keys.AnnotationSidecars: sidecarsValue,
		keys.AnnotationEnabled:  strings.Repeat("t", maxAnnotations-len(sidecarsValue)-len(keys.AnnotationSidecars)-len(keys.AnnotationEnabled)),
	}
	return p
}

// discard is a work queue that drops what it is given: the measure below
// is of the cache alone, not of the keys waiting for the workers.
type discard struct {
	workqueue.TypedRateLimitingInterface[string]
}

func (discard) Add(string) {}

func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestTheWorstPodIsWithinTheCapacityModel builds the largest pods a tenant
// of an opted-in namespace can write where the cache might keep them, has
// the cluster-wide watch's store hold them, and checks what each entry
// holds (Packed.heapBytes, computed from its allocations) against what the
// pod is charged against the capacity (Packed.Units: a pod for each
// CapacityHeapPerPod begun): no pod holds more than it is charged, so no
// pod breaks the memory model behind Capacity. Once, a 200 KiB sidecars
// annotation cost 213,497 B per pod against the 2 KiB the model assumed
// (104 times), and was counted as one pod. What the API server keeps of a
// pod's metadata costs the cache nothing but its name: no string of the
// entry lies in it, and an entry holds the same bytes with labels and
// annotations to the API's limit as without them. The heap the store
// retains is measured too, and logged: a live-heap difference moves with
// whatever else the process allocates or frees meanwhile (on a loaded
// machine, by hundreds of bytes a pod), so it is no pass/fail bound.
func TestTheWorstPodIsWithinTheCapacityModel(t *testing.T) {
	var rules []corev1.ContainerRestartRule
	for j := range slim.MaxRules {
		values := make([]int32, slim.MaxExitCodes)
		for v := range values {
			values[v] = int32(1000*j + v)
		}
		if j == slim.MaxRules-1 {
			values[0] = 3 // the apps' exit code
		}
		rules = append(rules, corev1.ContainerRestartRule{Action: corev1.ContainerRestartRuleActionRestart,
			ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: values}})
	}
	shapes := []struct {
		name     string
		pods     int
		pod      func(i int) *corev1.Pod
		maxUnits int
	}{
		// The longest names, and nothing else: the floor of what a
		// tenant's pod costs.
		{"longest names, an app", 400, func(i int) *corev1.Pod { return worstPod(i, 1, nil, false) }, 2},
		// The same with labels and annotations to the API's limit, a
		// 128 KiB sidecars annotation among them: costs the same.
		{"and the largest labels and annotations", 400, func(i int) *corev1.Pod { return worstPod(i, 1, nil, true) }, 2},
		// As many apps as the sidecars annotation may name.
		{"and 64 apps the annotation names", 200, func(i int) *corev1.Pod { return worstPod(i, slim.MaxSidecars, nil, true) }, 0},
		// The slim bounds: 256 apps and 256 init containers, each with 20
		// rules of 255 exit codes (a pod far larger than the API server
		// stores).
		{"and 256 apps and init containers with 20 rules of 255 codes", 32, func(i int) *corev1.Pod {
			return worstPod(i, slim.MaxContainers, rules, true)
		}, 0},
	}
	held := make([][]int, len(shapes)) // heapBytes of each pod, by shape
	measured := make([]float64, len(shapes))
	for k, shape := range shapes {
		w := New(Lists{}, nil, metrics.NewBridge(nil), Options{})
		w.queue = discard{w.queue}
		w.setScope("tenant", ScopeAll)
		s := w.labelled
		if err := s.Replace(nil, ""); err != nil {
			t.Fatal(err)
		}
		held[k] = make([]int, shape.pods)
		var bytes, units int64
		before := liveHeap()
		for i := range shape.pods {
			p := shape.pod(i)
			if err := s.Add(p); err != nil {
				t.Fatal(err)
			}
			c, ok := s.get(p.Namespace + "/" + p.Name)
			if !ok {
				t.Fatalf("%s: pod %d not held", shape.name, i)
			}
			if field := metadataHeld(c, p); field != "" {
				t.Fatalf("%s: pod %d's entry holds its metadata: %s", shape.name, i, field)
			}
			if c.heapBytes() > c.Units()*CapacityHeapPerPod {
				t.Fatalf("%s: pod %d holds %d B, over the %d B of the %d pods it is charged", shape.name, i, c.heapBytes(), c.Units()*CapacityHeapPerPod, c.Units())
			}
			if shape.maxUnits > 0 && c.Units() > shape.maxUnits {
				t.Fatalf("%s: pod %d charged %d pods, want at most %d", shape.name, i, c.Units(), shape.maxUnits)
			}
			held[k][i] = c.heapBytes()
			bytes += int64(c.heapBytes())
			units += int64(c.Units())
		}
		measured[k] = float64(int64(liveHeap())-int64(before)) / float64(shape.pods)
		runtime.KeepAlive(w)
		if pods, charged := s.size(); pods != shape.pods || charged != units {
			t.Errorf("%s: the store counts %d pods charged %d, want %d charged %d (their Units)", shape.name, pods, charged, shape.pods, units)
		}
		raw, _ := json.Marshal(shape.pod(shape.pods))
		t.Logf("%s: %d B held per pod (heapBytes), charged %.0f pods of %d B; measured: %.0f B of live heap retained per pod; the pod: %d KiB of JSON",
			shape.name, bytes/int64(shape.pods), float64(units)/float64(shape.pods), CapacityHeapPerPod, measured[k], len(raw)>>10)
	}
	// Shapes 0 and 1 are the same pods but for their labels and annotations.
	for i := range held[0] {
		if held[1][i] != held[0][i] {
			t.Errorf("pod %d: its entry holds %d B with labels and annotations to the API's limit, %d B without", i, held[1][i], held[0][i])
			break
		}
	}
	t.Logf("labels and annotations to the API's limit: %+.0f B of live heap per pod, measured", measured[1]-measured[0])
}
