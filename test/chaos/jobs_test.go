//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/istio"
	"github.com/istio-aux/istio-aux/test/istioaux"
	"github.com/istio-aux/istio-aux/test/mesh"
)

// app is the one application container of every test Job.
const app = "app"

// kind is a Job shape with a designed outcome.
type kind int

const (
	neverOK   kind = iota // restartPolicy Never, exit 0: Complete
	neverFail             // restartPolicy Never, exit 1, no retries: Failed
	retryOK               // restartPolicy OnFailure, exit 1 then 0: Complete after one restart
	control               // in a namespace not opted in: never touched, never finishes
	optOut                // opted-in namespace, pod annotation enabled=false: same
)

func (k kind) String() string {
	return [...]string{"never-ok", "never-fail", "onfailure-retry", "control-ns", "opt-out-pod"}[k]
}

// optedIn reports whether istio-aux must handle the kind's pods.
func (k kind) optedIn() bool { return k <= retryOK }

// want is the Job condition the kind must reach ("" none: its pods stay
// Running with the proxy up, as without istio-aux).
func (k kind) want() batchv1.JobConditionType {
	switch k {
	case neverOK, retryOK:
		return batchv1.JobComplete
	case neverFail:
		return batchv1.JobFailed
	}
	return ""
}

// testJob is one Job of a run.
type testJob struct {
	kind      kind
	namespace string
	name      string
	runFor    int // seconds per attempt
}

func (j testJob) object() *batchv1.Job {
	policy, codes, backoff := corev1.RestartPolicyNever, "0", int32(0)
	switch j.kind {
	case neverFail:
		codes = "1"
	case retryOK:
		// A too-early quit makes kwok fail every later attempt (no network),
		// so the Job would run out of its 3 retries and fail.
		policy, codes, backoff = corev1.RestartPolicyOnFailure, "1,0", 3
	}
	ann := map[string]string{
		cluster.AnnotationRunFor:    fmt.Sprintf("%ds", j.runFor),
		cluster.AnnotationExitCodes: codes,
	}
	if j.kind == optOut {
		ann[keys.AnnotationEnabled] = "false"
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: j.name, Namespace: j.namespace},
		Spec: batchv1.JobSpec{
			Completions: ptr.To(int32(1)), Parallelism: ptr.To(int32(1)), BackoffLimit: ptr.To(backoff),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Annotations: ann},
				Spec: corev1.PodSpec{
					// What the ServiceAccount admission plugin sets on a
					// real cluster; istiod's token volume needs it.
					ServiceAccountName: istio.ServiceAccount,
					RestartPolicy:      policy,
					Containers:         []corev1.Container{{Name: app, Image: "busybox", Command: []string{"sh", "-c", "work"}}},
				},
			},
		},
	}
}

// jobCondition is the Job's final condition, Complete or Failed, or "".
func jobCondition(j *batchv1.Job) batchv1.JobConditionType {
	for _, typ := range []batchv1.JobConditionType{batchv1.JobComplete, batchv1.JobFailed} {
		if mesh.JobHas(j, typ) {
			return typ
		}
	}
	return ""
}

// finished counts opted-in Jobs that reached a final condition.
func finished(ctx context.Context, jobs []testJob) (int, error) {
	done := map[string]bool{}
	for _, ns := range namespaces(jobs) {
		l, err := env.Client().BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return 0, err
		}
		for _, j := range l.Items {
			if jobCondition(&j) != "" {
				done[j.Namespace+"/"+j.Name] = true
			}
		}
	}
	n := 0
	for _, j := range jobs {
		if j.kind.optedIn() && done[j.namespace+"/"+j.name] {
			n++
		}
	}
	return n, nil
}

// summary is how long pods waited for their quit after their app ended:
// median, 99th percentile and maximum (a long tail is retries with
// back-off, or the bridge's resync for an event that ran out of them).
func summary(latencies []time.Duration) string {
	l := slices.Clone(latencies)
	if len(l) == 0 {
		return "-"
	}
	slices.Sort(l)
	at := func(q float64) time.Duration { return l[int(q*float64(len(l)-1))].Round(time.Second) }
	return fmt.Sprintf("p50 %s, p99 %s, max %s", at(.5), at(.99), at(1))
}

func namespaces(jobs []testJob) []string {
	set := map[string]bool{}
	for _, j := range jobs {
		set[j.namespace] = true
	}
	return slices.Sorted(maps.Keys(set))
}

// findings is what verify saw; problems make the test fail.
type findings struct {
	optedInPods, controlPods     int
	quits, duplicates            int
	early, lateExec, neverQuit   int
	touchedControl, wrongOutcome int
	latencies                    []time.Duration // app finished → first quit (second precision)
	// byPhase splits latencies by when the app finished: before the NATS
	// outage (outage: its start and end, when set), during it, or after.
	outage   [2]time.Time
	byPhase  [3][]time.Duration
	problems []string
}

func (f *findings) problem(format string, args ...any) {
	if len(f.problems) < 40 {
		f.problems = append(f.problems, fmt.Sprintf(format, args...))
	}
}

// verify checks every Job and pod against its design and the stub's quit
// record:
//   - each Job reached its designed condition (opted in) or none (not);
//   - each opted-in pod was quit at least once, never before its app's
//     final attempt ended, and never again after istio-proxy had exited;
//   - no pod outside the opt-in was quit or mutated, and its proxy runs.
func verify(t *testing.T, jobs []testJob, outage [2]time.Time) *findings {
	t.Helper()
	f := &findings{outage: outage}
	byPod := byUID(quits(t))
	for _, j := range jobs {
		job, err := env.Client().BatchV1().Jobs(j.namespace).Get(context.Background(), j.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := jobCondition(job); got != j.kind.want() {
			f.wrongOutcome++
			f.problem("job %s/%s (%s): condition %q, want %q", j.namespace, j.name, j.kind, got, j.kind.want())
		}
		pods := mesh.Pods(t, env, j.namespace, j.name)
		if len(pods) != 1 {
			f.problem("job %s/%s: %d pods, want 1", j.namespace, j.name, len(pods))
		}
		for i := range pods {
			verifyPod(f, j.kind, &pods[i], byPod[string(pods[i].UID)])
		}
	}
	return f
}

func verifyPod(f *findings, k kind, p *corev1.Pod, quits []cluster.Quit) {
	id := p.Namespace + "/" + p.Name + " (" + k.String() + ")"
	a, proxy := cluster.ContainerStatus(p, app), cluster.ContainerStatus(p, keys.ProxyContainer)
	if !k.optedIn() {
		f.controlPods++
		if len(quits) > 0 {
			f.touchedControl++
			f.problem("%s: quit %d times though not opted in", id, len(quits))
		}
		if k == control && istioaux.HasHold(p) {
			f.touchedControl++
			f.problem("%s: mutated by the webhook: %q", id, p.Annotations[keys.AnnotationProxyConfig])
		}
		if !mesh.Stuck(p, app) {
			f.problem("%s: want app done and istio-proxy running, got phase %s", id, p.Status.Phase)
		}
		return
	}
	f.optedInPods++
	f.quits += len(quits)
	if len(quits) == 0 {
		f.neverQuit++
		f.problem("%s: never quit (phase %s)", id, p.Status.Phase)
		return
	}
	f.duplicates += len(quits) - 1
	done := a.State.Terminated
	if done == nil {
		f.problem("%s: app not terminated but quit at %s", id, quits[0].Time)
		f.early++
		return
	}
	wantRestarts := int32(0)
	if k == retryOK {
		wantRestarts = 1
	}
	if a.RestartCount != wantRestarts {
		// An attempt started after an early quit fails (kwok: no network).
		f.early++
		f.problem("%s: app restarted %d times, want %d", id, a.RestartCount, wantRestarts)
	}
	first := quits[0]
	// Pod times have whole seconds (truncated): a quit before them was early
	// for sure; one within the same second is caught by the outcome checks
	// above, as kwok fails an app whose proxy has gone.
	if first.Time.Before(done.StartedAt.Time) || first.Time.Before(done.FinishedAt.Time) {
		f.early++
		f.problem("%s: quit at %s, app's last attempt %s–%s", id, first.Time.Format(time.StampMilli), done.StartedAt.Format(time.Stamp), done.FinishedAt.Format(time.Stamp))
	}
	lat := first.Time.Sub(done.FinishedAt.Time)
	f.latencies = append(f.latencies, lat)
	if end := done.FinishedAt.Time; !f.outage[0].IsZero() {
		phase := 1
		switch {
		case end.Before(f.outage[0]):
			phase = 0
		case end.After(f.outage[1]):
			phase = 2
		}
		f.byPhase[phase] = append(f.byPhase[phase], lat)
	}
	if t := proxy.State.Terminated; t == nil {
		f.problem("%s: quit but istio-proxy did not exit", id)
	} else {
		for _, q := range quits[1:] {
			// A repeat while the proxy was still seen running is an
			// at-least-once redelivery (harmless: quitquitquit is
			// idempotent); one after it had exited means a decision was
			// taken on a stale pod.
			if q.Time.After(t.FinishedAt.Add(2 * time.Second)) {
				f.lateExec++
				f.problem("%s: quit again at %s, after istio-proxy exited at %s", id, q.Time.Format(time.StampMilli), t.FinishedAt.Format(time.Stamp))
			}
		}
	}
}

func phase(l []time.Duration) string { return fmt.Sprintf("%s (%d pods)", summary(l), len(l)) }
