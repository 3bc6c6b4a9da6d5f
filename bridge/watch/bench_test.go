package watch_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/istio-aux/istio-aux/bridge/internal/testenv"
	"github.com/istio-aux/istio-aux/bridge/metrics"
	"github.com/istio-aux/istio-aux/bridge/publish"
	"github.com/istio-aux/istio-aux/bridge/transport"
	"github.com/istio-aux/istio-aux/bridge/watch"
	"github.com/istio-aux/istio-aux/pkg/decision"
	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/pkg/podevent"
	"github.com/istio-aux/istio-aux/pkg/slim"
)

// injectedPod is a finished Job pod as the API server returns it after
// Istio's injector ran: the annotations, init container, volumes and
// managedFields that make real pods big.
func injectedPod(name string) *corev1.Pod {
	env := make([]corev1.EnvVar, 0, 20)
	for i := range 20 {
		env = append(env, corev1.EnvVar{Name: fmt.Sprintf("ISTIO_META_%d", i), Value: strings.Repeat("v", 40)})
	}
	proxy := corev1.Container{Name: "istio-proxy", Image: "docker.io/istio/proxyv2:1.27.0",
		Args: []string{"proxy", "sidecar", "--domain", "$(POD_NAMESPACE).svc.cluster.local", "--proxyLogLevel=warning"},
		Env:  env, Ports: []corev1.ContainerPort{{Name: "http-envoy-prom", ContainerPort: 15090}},
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")}},
		VolumeMounts: []corev1.VolumeMount{{Name: "istio-envoy", MountPath: "/etc/istio/proxy"}, {Name: "istio-data", MountPath: "/var/lib/istio/data"}}}
	now := metav1.Unix(1_700_000_000, 0)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "jobs", UID: types.UID("uid-" + name), ResourceVersion: "1",
			GenerateName: "mnist-", Labels: map[string]string{"job-name": "mnist", "controller-uid": "0a1b2c3d", "security.istio.io/tlsMode": "istio"},
			Annotations: map[string]string{
				"sidecar.istio.io/status":                          `{"initContainers":["istio-init"],"containers":["istio-proxy"],"volumes":["workload-socket","credential-socket","workload-certs","istio-envoy","istio-data","istio-podinfo","istio-token","istiod-ca-cert"],"imagePullSecrets":null,"revision":"default"}`,
				"kubectl.kubernetes.io/default-container":          "app",
				"prometheus.io/path":                               "/stats/prometheus",
				"proxy.istio.io/config":                            "holdApplicationUntilProxyStarts: true\n",
				"istio.io/rev":                                     "default",
				"kubectl.kubernetes.io/last-applied-configuration": strings.Repeat("x", 600)},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "mnist", UID: "0a1b2c3d"}},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager", Operation: "Update",
				FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:labels":{"f:job-name":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"app\"}":{}}}}`)}},
				{Manager: "kubelet", Operation: "Update", Subresource: "status",
					FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:conditions":{},"f:containerStatuses":{},"f:phase":{},"f:podIP":{}}}`)}}}},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, NodeName: "node-1", ServiceAccountName: "default",
			InitContainers: []corev1.Container{{Name: "istio-init", Image: proxy.Image, Args: []string{"istio-iptables", "-p", "15001", "-z", "15006", "-u", "1337"}}},
			Containers: []corev1.Container{proxy, {Name: "app", Image: "registry.example/mnist:1.0", Command: []string{"python", "-u", "mnist.py"},
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}},
			Volumes: []corev1.Volume{{Name: "istio-envoy", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
				{Name: "istio-data"}, {Name: "istio-podinfo"}, {Name: "istio-token"}, {Name: "istiod-ca-cert"}},
			Tolerations: []corev1.Toleration{{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.1.17", HostIP: "172.18.0.3", QOSClass: corev1.PodQOSBurstable, StartTime: &now,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: now, Reason: "ContainersNotReady", Message: "containers with unready status: [app]"},
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now}},
			InitContainerStatuses: []corev1.ContainerStatus{{Name: "istio-init", Image: proxy.Image, ImageID: "docker.io/istio/proxyv2@sha256:" + strings.Repeat("a", 64),
				ContainerID: "containerd://" + strings.Repeat("b", 64), State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: now, FinishedAt: now}}}},
			ContainerStatuses: []corev1.ContainerStatus{
				{Name: "istio-proxy", Ready: true, Image: proxy.Image, ImageID: "docker.io/istio/proxyv2@sha256:" + strings.Repeat("a", 64),
					ContainerID: "containerd://" + strings.Repeat("c", 64), State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}},
				{Name: "app", Image: "registry.example/mnist:1.0", ImageID: "registry.example/mnist@sha256:" + strings.Repeat("d", 64),
					ContainerID: "containerd://" + strings.Repeat("e", 64), State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: now, FinishedAt: now}}}}},
	}
}

// BenchmarkPipeline pushes pod updates through transform → change filter →
// CloudEvent encoding → JetStream async publish, and waits for every ack.
func BenchmarkPipeline(b *testing.B) {
	ctx := testenv.Context(b)
	srv := testenv.StartServer(b)
	nc := testenv.Connect(b, srv.URL())
	js, err := publish.NewJetStream(nc, 1024)
	if err != nil {
		b.Fatal(err)
	}
	st, err := transport.Ensure(ctx, js, transport.DefaultName)
	if err != nil {
		b.Fatal(err)
	}
	pub := publish.New(nc, js, metrics.NewBridge(nil), transport.DefaultName, 1024)
	go func() { _ = pub.Run(ctx) }()

	// Like the watcher's workers, several goroutines run the pipeline, each
	// over its own pods (a pod key is only ever in one worker at a time).
	const perWorker = 500
	ns := map[string]string{keys.LabelEnabled: "true"}
	var acked, failed, next atomic.Int64
	var worker atomic.Int32
	done := func(err error) {
		if err != nil {
			failed.Add(1)
		}
		acked.Add(1)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		w := worker.Add(1)
		pods := make([]*corev1.Pod, perWorker)
		for i := range pods {
			pods[i] = injectedPod(fmt.Sprintf("mnist-%d-%d", w, i))
		}
		last := make(map[string]uint64, perWorker)
		for i := 0; pb.Next(); i++ {
			next.Add(1)
			full := pods[i%perWorker]
			// Each update is a new decision-relevant state (a new restart
			// count), as a watch stream of distinct updates would be.
			full.ResourceVersion = fmt.Sprint(i + 2)
			full.Status.ContainerStatuses[1].RestartCount = int32(i / perWorker)
			obj, _ := watch.PackTransform(full)
			packed := obj.(*watch.Packed)
			pod := packed.Unpack()
			l, has := last[pod.Name]
			v := watch.Evaluate(decision.Options{}, false, watch.Input{Pod: pod, Fingerprint: packed.Fingerprint(), NamespaceLabels: ns, Last: l, HasLast: has})
			if !v.Publish {
				b.Errorf("update %d not published: %s", i, v.Reason)
				return
			}
			last[pod.Name] = v.Fingerprint
			e, err := podevent.New("bench", pod)
			if err != nil {
				b.Error(err)
				return
			}
			for {
				err := pub.Publish(ctx, &e, slim.DedupID(pod.UID, v.Fingerprint), done)
				if err == nil {
					break
				}
				if !strings.Contains(err.Error(), jetstream.ErrTooManyStalledMsgs.Error()) {
					b.Error(err)
					return
				}
			}
		}
	})
	for acked.Load() < next.Load() {
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(start)
	cpu := cpuTime() - cpu0
	b.StopTimer()
	if failed.Load() > 0 {
		b.Fatalf("%d publishes failed", failed.Load())
	}
	// The stream keeps one message per pod (MaxMsgsPerSubject), so its
	// last sequence, not its message count, says every update was stored
	// and none deduplicated.
	if info, err := st.Info(ctx); err == nil && info.State.LastSeq != uint64(b.N) {
		b.Fatalf("stream stored %d messages, want %d", info.State.LastSeq, b.N)
	}
	// CPU per update (bridge and embedded server together) does not depend
	// on how busy the machine is; updates/s does.
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/update")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "updates/s")
}

// BenchmarkCacheBytesPerPod measures the heap an informer store holds per
// pod for 10k pods, slimmed by the transform versus full. Pods are decoded
// from JSON one by one, as the reflector does, so no strings are shared.
func BenchmarkCacheBytesPerPod(b *testing.B) {
	const n = 10_000
	raw, err := json.Marshal(injectedPod("POD-NAME-XXXXX"))
	if err != nil {
		b.Fatal(err)
	}
	measure := func(transform cache.TransformFunc) float64 {
		store := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		before := heap()
		for i := range n {
			one := bytes.ReplaceAll(raw, []byte("POD-NAME-XXXXX"), []byte(fmt.Sprintf("mnist-%09d", i)))
			pod := &corev1.Pod{}
			if err := json.Unmarshal(one, pod); err != nil {
				b.Fatal(err)
			}
			obj, err := transform(pod)
			if err != nil {
				b.Fatal(err)
			}
			if err := store.Add(obj); err != nil {
				b.Fatal(err)
			}
		}
		after := heap()
		runtime.KeepAlive(store)
		return float64(after-before) / n
	}
	var packed, full float64
	for b.Loop() {
		packed = measure(watch.PackTransform)
		full = measure(func(o any) (any, error) { return o, nil })
	}
	b.ReportMetric(packed, "B/pod-slim")
	b.ReportMetric(full, "B/pod-full")
	if packed > 2048 {
		b.Errorf("slim cache holds %.0f B/pod, over the 2 KiB target", packed)
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
