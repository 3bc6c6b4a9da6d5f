//go:build e2e

package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/istioaux"
	"github.com/istio-aux/istio-aux/test/mesh"
	"github.com/istio-aux/istio-aux/test/poll"
	webhookadmission "github.com/istio-aux/istio-aux/webhook/admission"
)

// The admission namespaces: istio-aux's webhook mutates every pod in on;
// off is not opted in (istio-aux's selectors keep the API server from
// calling it); the floor webhook (cmd/floorwebhook) mutates every pod in
// floor, and only there.
const (
	admissionOn    = "bench-admission"
	admissionOff   = "bench-admission-off"
	admissionFloor = "bench-admission-floor"
	floorLabel     = "bench.istio-aux.dev/floor"
	floorWebhook   = "floor.bench.istio-aux.dev"
)

// arm is one namespace pods are created in, and whether a webhook must have
// mutated them.
type arm struct {
	ns      string
	mutated bool
}

// admission times sequential pod CREATEs on the real kube-apiserver
// (docs/bench.md): with no webhook registered, then with istio-aux's
// webhook and the floor webhook registered, the arms in turn so that they
// see the same load. It returns the running istio-aux.
func admission(t *testing.T, c *cluster.Cluster, cs kubernetes.Interface, start func() *istioaux.IstioAux, p params, res *results, log io.Writer) *istioaux.IstioAux {
	ctx := context.Background()
	for ns, labels := range map[string]map[string]string{admissionOn: mesh.OptedIn, admissionOff: nil, admissionFloor: {floorLabel: "true"}} {
		if err := parkedNamespace(ctx, cs, ns, labels); err != nil {
			t.Fatal(err)
		}
	}
	unregistered := timeCreates(t, cs, "unregistered", p.creates,
		arm{admissionOff, false}, arm{admissionOn, false}, arm{admissionFloor, false})
	a := start()
	ourPid, _ := a.Pids()
	floorPid := startFloorWebhook(t, c, cs, log).Pid()
	// What each process spends with nothing to answer (informers, timers,
	// the runtime): the part of its CPU per call that is not the calls'.
	ourIdle0, floorIdle0 := cpuOf(t, ourPid), cpuOf(t, floorPid)
	time.Sleep(idleWindow) // the idle window itself, not a wait for anything
	ourIdle, floorIdle := cpuOf(t, ourPid)-ourIdle0, cpuOf(t, floorPid)-floorIdle0
	ourCPU0, floorCPU0 := cpuOf(t, ourPid), cpuOf(t, floorPid)
	stopProfile := profileWebhook(t, cs, ourPid)
	loopStart := time.Now()
	registered := timeCreates(t, cs, "registered", p.creates,
		arm{admissionOff, false}, arm{admissionOn, true}, arm{admissionFloor, true})
	loop := time.Since(loopStart)
	stopProfile()
	// Each webhook answered every create of its arm, the untimed ones too.
	calls := time.Duration(p.creates + warmupCreates)
	ourTotal, floorTotal := cpuOf(t, ourPid)-ourCPU0, cpuOf(t, floorPid)-floorCPU0
	ourCPU, floorCPU := ourTotal/calls, floorTotal/calls
	ourCall, floorCall := callCPU(ourTotal, ourIdle, loop, calls), callCPU(floorTotal, floorIdle, loop, calls)
	without, with, floor := registered[0], registered[1], registered[2]
	floorTimed, ourTimed := webhookCallMean(t, cs, floorWebhook), webhookCallMean(t, cs, webhookadmission.WebhookEnabled)
	// The pods are only timed; the memory phase must not count them.
	for _, ns := range []string{admissionOn, admissionOff, admissionFloor} {
		if err := cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	all := slices.Concat(unregistered...)
	for _, row := range []struct {
		what string
		d    []time.Duration
	}{{"no webhook registered", all}, {"registered, not called", without}, {"floor webhook mutating", floor}, {"istio-aux mutating", with}} {
		res.add("webhook", fmt.Sprintf("pod CREATE p50 / p99, %s (n=%d)", row.what, len(row.d)), p50p99(row.d), "", "")
	}
	res.add("webhook", "the API server's own timing of the webhook call, mean: floor / istio-aux",
		ms(floorTimed)+" / "+ms(ourTimed), "", "")
	cpuRatio := float64(ourCPU) / float64(max(floorCPU, 1))
	res.add("webhook", "the webhook process's CPU per call, istio-aux / floor (all of it: TLS, HTTP, framework)",
		fmt.Sprintf("%.2f× (%d / %d µs)", cpuRatio, ourCPU.Microseconds(), floorCPU.Microseconds()),
		fmt.Sprintf("≤ %.2f× floor", maxAdmissionToFloor), verdict(floorCPU > 0 && cpuRatio <= maxAdmissionToFloor))
	res.add("webhook", fmt.Sprintf("the webhook process's CPU with nothing to answer, over %v: istio-aux / floor", idleWindow),
		fmt.Sprintf("%.1f / %.1f ms per second", msPerSecond(ourIdle, idleWindow), msPerSecond(floorIdle, idleWindow)), "", "")
	res.add("webhook", fmt.Sprintf("the webhook process's CPU per call less its idle rate over the %v loop, istio-aux / floor", loop.Round(time.Second)),
		fmt.Sprintf("%.2f× (%d / %d µs)", float64(ourCall)/float64(max(floorCall, 1)), ourCall.Microseconds(), floorCall.Microseconds()), "", "")
	// A ratio to the floor in the same interleaved loop: the absolute added
	// p99 moves with the host's load, and both arms see the same load.
	added := func(d []time.Duration, q float64) time.Duration { return percentile(d, q) - percentile(without, q) }
	ours, floorP99 := added(with, 0.99), added(floor, 0.99)
	toFloor := ratio(ours, floorP99)
	res.add("webhook", "added CREATE latency (mutating - not called), p99 istio-aux / p99 floor webhook, same run",
		fmt.Sprintf("%.2f× (p50 / p99: istio-aux %s / %s, floor %s / %s)", toFloor, ms(added(with, 0.5)), ms(ours), ms(added(floor, 0.5)), ms(floorP99)),
		fmt.Sprintf("≤ %.2f× floor", maxAdmissionToFloor), verdict(floorP99 > 0 && toFloor <= maxAdmissionToFloor))
	return a
}

// maxAdmissionToFloor bounds istio-aux's added pod CREATE p99 (issue 17)
// and its webhook process's CPU per call (issue 25) as multiples of the
// floor webhook's.
const maxAdmissionToFloor = 1.25

// startFloorWebhook runs cmd/floorwebhook with a serving certificate from
// the cluster's CA, registers it for the floor namespace (failing closed, so
// a pod it did not mutate fails the run) and waits until it mutates a
// dry-run pod.
func startFloorWebhook(t *testing.T, c *cluster.Cluster, cs kubernetes.Interface, log io.Writer) *cluster.Process {
	t.Helper()
	ctx := context.Background()
	bin := istioaux.MustBuild(t, "./test/bench/cmd/floorwebhook", "floorwebhook")
	cert, key, err := c.CA().Serving()
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(c.Dir(), "floor.crt"), filepath.Join(c.Dir(), "floor.key")
	for file, pem := range map[string][]byte{certFile: cert, keyFile: key} {
		if err := os.WriteFile(file, pem, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	port, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	proc, err := cluster.StartProcess("floorwebhook", log, []string{"ADDR=" + addr, "CERT_FILE=" + certFile, "KEY_FILE=" + keyFile}, bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proc.Stop() })
	url := "https://" + addr + "/mutate"
	scope := admissionregistrationv1.NamespacedScope
	if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-floor"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    floorWebhook,
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: c.CA().CertPEM},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{floorLabel: "true"}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds:          ptr.To(int32(webhookadmission.DefaultTimeout.Seconds())),
			ReinvocationPolicy:      ptr.To(admissionregistrationv1.NeverReinvocationPolicy),
			AdmissionReviewVersions: []string{"v1"},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{
					APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}, Scope: &scope,
				},
			}},
		}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	probe := benchPod("floor-probe")
	probe.Namespace = admissionFloor
	err = proc.WaitUp(ctx, time.Minute, func(ctx context.Context) error {
		return istioaux.DryRunMutated(ctx, cs, probe, istioaux.HasHold)
	})
	if err != nil {
		t.Fatalf("the floor webhook never mutated a pod: %v", err)
	}
	return proc
}

const (
	idleWindow    = 10 * time.Second // how long the webhooks' CPU is watched with no call
	warmupCreates = 10               // untimed creates per arm first: they warm connections and the API server's caches
)

// callCPU is a process's CPU per call over a loop of calls that took loop
// and cost total, less what it spent idle over idleWindow scaled to the
// loop.
func callCPU(total, idle, loop, calls time.Duration) time.Duration {
	rest := total - time.Duration(float64(idle)*loop.Seconds()/idleWindow.Seconds())
	return max(rest, 0) / calls
}

// timeCreates creates n pods in each arm's namespace, one after another in
// turn, and returns each CREATE's round trip per arm. It checks that a
// webhook mutated exactly the pods of the arms that say so.
func timeCreates(t *testing.T, cs kubernetes.Interface, prefix string, n int, arms ...arm) [][]time.Duration {
	ctx := context.Background()
	create := func(a arm, name string) time.Duration {
		pod := benchPod(name)
		pod.Spec.NodeName = parkedNode
		start := time.Now()
		got, err := cs.CoreV1().Pods(a.ns).Create(ctx, pod, metav1.CreateOptions{})
		d := time.Since(start)
		if err != nil {
			t.Fatal(err)
		}
		if has := got.Annotations[keys.AnnotationProxyConfig] != ""; has != a.mutated {
			t.Fatalf("pod %s/%s: mutated=%v, want %v", a.ns, got.Name, has, a.mutated)
		}
		return d
	}
	lat := make([][]time.Duration, len(arms))
	for i := range n + warmupCreates {
		name := fmt.Sprintf("%s-%05d", prefix, i)
		for j, a := range arms {
			d := create(a, name)
			if i >= warmupCreates {
				lat[j] = append(lat[j], d)
			}
		}
	}
	return lat
}

// webhookCallMean is the mean of the API server's own timing of its calls
// to the webhook named webhookName
// (apiserver_admission_webhook_admission_duration_seconds); 0 when it made
// none.
func webhookCallMean(t *testing.T, cs kubernetes.Interface, webhookName string) time.Duration {
	const family = "apiserver_admission_webhook_admission_duration_seconds"
	label := `name="` + webhookName + `"`
	sum, count := apiserverMetric(t, cs, family+"_sum", label), apiserverMetric(t, cs, family+"_count", label)
	if count == 0 {
		return 0
	}
	return time.Duration(sum / count * float64(time.Second))
}

// profileWebhook, with BENCH_PROFILE naming a directory, turns on the
// webhook's profiling (knative's runtime-profiling in config-observability,
// which the webhook watches) and saves CPU profiles of 5 s each there
// (webhook-cpu-N.pprof) until the function it returns is called, which
// drops the window then under way. Without it, it does nothing.
//
//	BENCH_PROFILE=/tmp/prof BENCH_ONLY=admission make bench
//	go tool pprof -top _output/bin/webhook /tmp/prof/webhook-cpu-*.pprof
func profileWebhook(t *testing.T, cs kubernetes.Interface, pid int) func() {
	dir := os.Getenv("BENCH_PROFILE")
	if dir == "" {
		return func() {}
	}
	ctx := context.Background()
	cm, err := cs.CoreV1().ConfigMaps(istioaux.SystemNamespace).Get(ctx, "config-observability", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["runtime-profiling"] = "enabled"
	if _, err := cs.CoreV1().ConfigMaps(istioaux.SystemNamespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatal(err)
	}
	base := ""
	for _, kv := range strings.Split(string(env), "\x00") {
		if port, ok := strings.CutPrefix(kv, "PROFILING_PORT="); ok {
			base = "http://127.0.0.1:" + port + "/debug/pprof/"
		}
	}
	// The ConfigMap takes a moment to reach the webhook.
	if err := poll.Until(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		return base != "" && cluster.GetOK(ctx, base) == nil, nil
	}); err != nil {
		t.Fatalf("the webhook's profiling did not come up at %q: %v", base, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for n := 0; saveProfile(pctx, base+"profile?seconds=5", filepath.Join(dir, fmt.Sprintf("webhook-cpu-%d.pprof", n))) == nil; n++ {
		}
	}()
	return func() {
		cancel()
		<-done
		t.Logf("webhook CPU profiles over the registered loop in %s", dir)
	}
}
