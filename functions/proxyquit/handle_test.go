package proxyquit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/httpstream"
	k8stesting "k8s.io/client-go/testing"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/istio-aux/istio-aux/pkg/podevent"
)

var defaultArgv = []string{"pilot-agent", "request", "POST", "quitquitquit"}

func TestHandle(t *testing.T) {
	done := donePod("job-1", "uid-1")
	appRunning := podSpec{name: "job-1", uid: "uid-1", policy: corev1.RestartPolicyNever, apps: []string{"app"},
		states: map[string]corev1.ContainerState{"app": running}, proxy: running}.pod()
	proxyExited := podSpec{name: "job-1", uid: "uid-1", policy: corev1.RestartPolicyNever, apps: []string{"app"},
		states: map[string]corev1.ContainerState{"app": exited(0)}, proxy: exited(0)}.pod()
	withAnnotation := func(p *corev1.Pod, k, v string) *corev1.Pod {
		p = p.DeepCopy()
		p.Annotations = map[string]string{k: v}
		return p
	}
	withUID := func(p *corev1.Pod, uid string) *corev1.Pod {
		p = p.DeepCopy()
		p.UID = types.UID(uid)
		return p
	}
	apiDown := func(resource string) func(*harness) {
		return func(h *harness) {
			h.client.PrependReactor("get", resource, func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewServiceUnavailable("etcd is down")
			})
		}
	}

	tests := []struct {
		name     string
		cfg      func(*Config)
		nsLabels map[string]string
		live     *corev1.Pod // nil: no live pod
		event    func(t *testing.T) cloudevents.Event
		setup    func(*harness)
		wantCode int
		wantOut  Outcome
		wantExec []execCall
		wantKube []string // substrings of the recorded Kubernetes Events, in order
		noAPI    bool     // the API must not be called at all
	}{{
		name:     "done pod: quit with the default argv in istio-proxy",
		nsLabels: optedIn, live: done, event: ev(done),
		wantCode: 200, wantOut: OutcomeQuit,
		wantExec: []execCall{{testNS, "job-1", "istio-proxy", defaultArgv}},
		wantKube: []string{"Normal ProxyQuit Quit istio-proxy: all apps terminated"},
	}, {
		name:     "legacy namespace label is honoured",
		nsLabels: map[string]string{"io.datastrophic/istio-aux": "enabled"}, live: done, event: ev(done),
		wantCode: 200, wantOut: OutcomeQuit,
		wantExec: []execCall{{testNS, "job-1", "istio-proxy", defaultArgv}},
		wantKube: []string{"Normal ProxyQuit"},
	}, {
		name: "configured command and sidecars",
		cfg: func(c *Config) {
			c.Settings.QuitCommand = []string{"curl", "-sf", "-XPOST", "http://127.0.0.1:15020/quitquitquit"}
			c.Settings.Decision.ExtraSidecars = []string{"vault-agent"}
		},
		nsLabels: optedIn,
		live:     withSidecar(done, "vault-agent"), event: ev(withSidecar(done, "vault-agent")),
		wantCode: 200, wantOut: OutcomeQuit,
		wantExec: []execCall{{testNS, "job-1", "istio-proxy", []string{"curl", "-sf", "-XPOST", "http://127.0.0.1:15020/quitquitquit"}}},
		wantKube: []string{"Normal ProxyQuit"},
	}, {
		name:     "unconfigured running sidecar is an app: wait",
		nsLabels: optedIn,
		live:     withSidecar(done, "vault-agent"), event: ev(withSidecar(done, "vault-agent")),
		wantCode: 200, wantOut: OutcomeWait, noAPI: true,
	}, {
		name:     "pod opted in by annotation in an unlabelled namespace",
		live:     withAnnotation(done, "istio-aux.dev/enabled", "true"),
		event:    ev(withAnnotation(done, "istio-aux.dev/enabled", "true")),
		wantCode: 200, wantOut: OutcomeQuit,
		wantExec: []execCall{{testNS, "job-1", "istio-proxy", defaultArgv}},
		wantKube: []string{"Normal ProxyQuit"},
	}, {
		name:     "wrong type: 400",
		nsLabels: optedIn, live: done,
		event:    func(t *testing.T) cloudevents.Event { e := newEvent(t, done); e.SetType("com.example.other"); return e },
		wantCode: 400, wantOut: OutcomeInvalid, noAPI: true,
	}, {
		name:     "data is not a pod: 400",
		nsLabels: optedIn, live: done,
		event: func(t *testing.T) cloudevents.Event {
			e := newEvent(t, done)
			_ = e.SetData(cloudevents.ApplicationJSON, []byte(`{"metadata":`))
			return e
		},
		wantCode: 400, wantOut: OutcomeInvalid, noAPI: true,
	}, {
		name:     "subject names another pod: 400",
		nsLabels: optedIn, live: done,
		event: func(t *testing.T) cloudevents.Event {
			e := newEvent(t, done)
			e.SetSubject(podevent.Subject(testNS, "other"))
			return e
		},
		wantCode: 400, wantOut: OutcomeInvalid, noAPI: true,
	}, {
		name:     "ApiServerSource delete: nothing to do",
		nsLabels: optedIn, live: done, event: apiServerEvent(podevent.TypeAPIServerDelete, done),
		wantCode: 200, wantOut: OutcomeIgnored, noAPI: true,
	}, {
		name:     "ApiServerSource update of a done pod: quit",
		nsLabels: optedIn, live: done, event: apiServerEvent(podevent.TypeAPIServerUpdate, done),
		wantCode: 200, wantOut: OutcomeQuit,
		wantExec: []execCall{{testNS, "job-1", "istio-proxy", defaultArgv}},
		wantKube: []string{"Normal ProxyQuit"},
	}, {
		name:     "event pod still running: wait, no API call",
		nsLabels: optedIn, live: done, event: ev(appRunning),
		wantCode: 200, wantOut: OutcomeWait, noAPI: true,
	}, {
		name:     "duplicate event after the proxy exited: ignored, no API call",
		nsLabels: optedIn, live: proxyExited, event: ev(proxyExited),
		wantCode: 200, wantOut: OutcomeIgnored, noAPI: true,
	}, {
		name:     "late event, live proxy already exited: ignored",
		nsLabels: optedIn, live: proxyExited, event: ev(done),
		wantCode: 200, wantOut: OutcomeIgnored,
	}, {
		name:     "live pod restarted its app since the event: wait",
		nsLabels: optedIn, live: appRunning, event: ev(done),
		wantCode: 200, wantOut: OutcomeWait,
	}, {
		name:     "pod gone: success",
		nsLabels: optedIn, event: ev(done),
		wantCode: 200, wantOut: OutcomeGone,
	}, {
		name:     "same name, new pod: uid mismatch",
		nsLabels: optedIn, live: withUID(done, "uid-other"), event: ev(done),
		wantCode: 200, wantOut: OutcomeUIDMismatch,
	}, {
		name: "namespace not opted in",
		live: done, event: ev(done),
		wantCode: 200, wantOut: OutcomeNotOptedIn,
	}, {
		name:     "pod opted out by annotation in an opted-in namespace",
		nsLabels: optedIn,
		live:     withAnnotation(done, "istio-aux.dev/enabled", "false"),
		event:    ev(withAnnotation(done, "istio-aux.dev/enabled", "false")),
		wantCode: 200, wantOut: OutcomeNotOptedIn,
	}, {
		name:     "opted in by the event but opted out on the live pod",
		nsLabels: optedIn,
		live:     withAnnotation(done, "istio-aux.dev/enabled", "false"), event: ev(done),
		wantCode: 200, wantOut: OutcomeNotOptedIn,
	}, {
		name:     "pod GET fails: 503",
		nsLabels: optedIn, live: done, event: ev(done), setup: apiDown("pods"),
		wantCode: 503, wantOut: OutcomeError,
	}, {
		name:     "namespace GET fails: 503",
		nsLabels: optedIn, live: done, event: ev(done), setup: apiDown("namespaces"),
		wantCode: 503, wantOut: OutcomeError,
	}, {
		name:     "exec fails while the proxy runs: 500 and a Warning",
		nsLabels: optedIn, live: done, event: ev(done),
		setup: func(h *harness) {
			h.exec.hook = func(context.Context, execCall) (ExecOutput, error) {
				return ExecOutput{Stderr: "connection refused"}, errBoom
			}
		},
		wantCode: 500, wantOut: OutcomeFailed,
		wantExec: []execCall{{testNS, "job-1", "istio-proxy", defaultArgv}},
		// Nothing tells this error from a quit under way (the stream
		// cut as the proxy stopped): the ProxyQuit Event stays for the
		// redelivery to settle (TestMaybeQuitKeepsItsEvent).
		wantKube: []string{"Normal ProxyQuit", "Warning ProxyQuitFailed Quitting istio-proxy failed (will retry): boom; stderr: connection refused (the quit may be under way"},
	}, {
		name:     "the quit command exits non-zero: 422, for good",
		nsLabels: optedIn, live: done, event: ev(done),
		setup: func(h *harness) {
			h.exec.hook = func(context.Context, execCall) (ExecOutput, error) {
				return ExecOutput{Stderr: "not istio"}, fmt.Errorf("exec: %w", utilexec.CodeExitError{Err: errors.New("command terminated with exit code 3"), Code: 3})
			}
		},
		wantCode: 422, wantOut: OutcomeFailedFinal,
		wantExec: []execCall{{testNS, "job-1", "istio-proxy", defaultArgv}},
		wantKube: []string{"Warning ProxyQuitFailed Quitting istio-proxy failed for good (exit_code); istio-aux tries again when the pod changes: exec: command terminated with exit code 3; stderr: not istio"},
	}, {
		name:     "the exec policy denies the exec (over WebSocket): 422, for good",
		nsLabels: optedIn, live: done, event: ev(done),
		setup: func(h *harness) {
			h.exec.hook = func(context.Context, execCall) (ExecOutput, error) {
				denied := apierrors.NewForbidden(schema.GroupResource{Resource: "pods/exec"}, "job-1", errors.New("ValidatingAdmissionPolicy denied request"))
				return ExecOutput{}, fmt.Errorf("exec: %w", &httpstream.UpgradeFailureError{Cause: denied})
			}
		},
		wantCode: 422, wantOut: OutcomeFailedFinal,
		wantExec: []execCall{{testNS, "job-1", "istio-proxy", defaultArgv}},
		wantKube: []string{"Warning ProxyQuitFailed Quitting istio-proxy failed for good (denied)"},
	}, {
		name:     "exec throttled: 500, retried",
		nsLabels: optedIn, live: done, event: ev(done),
		setup: func(h *harness) {
			h.exec.hook = func(context.Context, execCall) (ExecOutput, error) {
				return ExecOutput{}, apierrors.NewTooManyRequests("slow down", 1)
			}
		},
		wantCode: 500, wantOut: OutcomeFailed,
		wantExec: []execCall{{testNS, "job-1", "istio-proxy", defaultArgv}},
		wantKube: []string{"Warning ProxyQuitFailed Quitting istio-proxy failed (will retry)"},
	}, {
		name:     "exec fails because the proxy just exited: success",
		nsLabels: optedIn, live: done, event: ev(done),
		setup: func(h *harness) {
			h.exec.hook = func(context.Context, execCall) (ExecOutput, error) {
				h.setPod(t, proxyExited)
				return ExecOutput{}, errors.New(`container not found ("istio-proxy")`)
			}
		},
		wantCode: 200, wantOut: OutcomeGone,
		wantExec: []execCall{{testNS, "job-1", "istio-proxy", defaultArgv}},
		// The quit's record, written before the exec, stays: the proxy
		// stopped as it was told to quit, or before.
		wantKube: []string{"Normal ProxyQuit Quit istio-proxy: all apps terminated"},
	}, {
		name:     "the quit command killed with its container, the kubelet reporting it a moment later: success, recorded",
		nsLabels: optedIn, live: done, event: ev(done),
		setup: func(h *harness) {
			h.exec.hook = func(context.Context, execCall) (ExecOutput, error) {
				return ExecOutput{}, utilexec.CodeExitError{Err: errors.New("command terminated with exit code 137"), Code: 137}
			}
			// The event's read and the first read after the exec see
			// the proxy running; the next sees it stopped.
			reads := 0
			h.client.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
				if reads++; reads < 3 {
					return true, done.DeepCopy(), nil
				}
				return true, proxyExited.DeepCopy(), nil
			})
		},
		wantCode: 200, wantOut: OutcomeGone,
		wantExec: []execCall{{testNS, "job-1", "istio-proxy", defaultArgv}},
		wantKube: []string{"Normal ProxyQuit Quit istio-proxy: all apps terminated"},
	}, {
		// A kubelet slow to report the stop (a rolling upgrade's load):
		// the kill was most likely the quit's own, so the record stays for
		// the retry to settle (TestHAFaults' rolling upgrade lost it when
		// this was final).
		name:     "the quit command killed, the proxy still running after the wait: 500, its Event kept for the retry",
		nsLabels: optedIn, live: done, event: ev(done),
		setup: func(h *harness) {
			h.exec.hook = func(context.Context, execCall) (ExecOutput, error) {
				return ExecOutput{}, utilexec.CodeExitError{Err: errors.New("command terminated with exit code 137"), Code: 137}
			}
		},
		wantCode: 500, wantOut: OutcomeFailed,
		wantExec: []execCall{{testNS, "job-1", "istio-proxy", defaultArgv}},
		wantKube: []string{"Normal ProxyQuit Quit istio-proxy: all apps terminated",
			"Warning ProxyQuitFailed Quitting istio-proxy failed (will retry): command terminated with exit code 137 (the quit may be under way"},
	}, {
		name:     "exec fails because the pod was deleted: success",
		nsLabels: optedIn, live: done, event: ev(done),
		setup: func(h *harness) {
			h.exec.hook = func(ctx context.Context, _ execCall) (ExecOutput, error) {
				if err := h.client.CoreV1().Pods(testNS).Delete(ctx, "job-1", metav1.DeleteOptions{}); err != nil {
					t.Error(err)
				}
				return ExecOutput{}, apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "job-1")
			}
		},
		wantCode: 200, wantOut: OutcomeGone,
		wantExec: []execCall{{testNS, "job-1", "istio-proxy", defaultArgv}},
	}, {
		name:     "exec hangs: the deadline turns it into 500",
		cfg:      func(c *Config) { c.ExecTimeout = 20 * time.Millisecond },
		nsLabels: optedIn, live: done, event: ev(done),
		setup: func(h *harness) {
			h.exec.hook = func(ctx context.Context, _ execCall) (ExecOutput, error) {
				<-ctx.Done()
				return ExecOutput{}, fmt.Errorf("stream: %w", ctx.Err())
			}
		},
		wantCode: 500, wantOut: OutcomeFailed,
		wantExec: []execCall{{testNS, "job-1", "istio-proxy", defaultArgv}},
		wantKube: []string{"Normal ProxyQuit", "Warning ProxyQuitFailed", "context deadline exceeded"},
	}}

	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			var live []*corev1.Pod
			if tc.live != nil {
				live = append(live, tc.live)
			}
			h := newHarness(t, cfg, tc.nsLabels, live...)
			if tc.setup != nil {
				tc.setup(h)
			}
			h.client.ClearActions()
			e := tc.event(t)

			res := h.fn.Handle(context.Background(), e)

			if got := codeOf(t, res); got != tc.wantCode {
				t.Errorf("code = %d, want %d (%v)", got, tc.wantCode, res)
			}
			if got := h.count(e.Type(), tc.wantOut); got != 1 {
				t.Errorf("events_total{outcome=%q} = %v, want 1 (%v)", tc.wantOut, got, res)
			}
			if got := h.exec.Calls(); !slices.EqualFunc(got, tc.wantExec, execCallEqual) {
				t.Errorf("exec calls = %v, want %v", got, tc.wantExec)
			}
			kube := strings.Join(h.events(), "\n")
			for _, want := range tc.wantKube {
				if !strings.Contains(kube, want) {
					t.Errorf("Kubernetes Events %q do not contain %q", kube, want)
				}
			}
			if len(tc.wantKube) == 0 && kube != "" {
				t.Errorf("unexpected Kubernetes Events %q", kube)
			}
			// The ProxyQuit Event, written before the exec, stays only
			// where the proxy was quit: taken back otherwise.
			wantQuit := slices.ContainsFunc(tc.wantKube, func(s string) bool { return strings.HasPrefix(s, "Normal ProxyQuit") })
			if got := h.quitEvents()["job-1"]; got != btoi(wantQuit) {
				t.Errorf("%d ProxyQuit Events left on the pod, want %d", got, btoi(wantQuit))
			}
			if tc.noAPI && len(h.client.Actions()) != 0 {
				t.Errorf("API calls %v, want none", h.client.Actions())
			}
			failures := counterValue(h.metrics.execFailures)
			if want := float64(btoi(tc.wantOut == OutcomeFailed || tc.wantOut == OutcomeFailedFinal)); failures != want {
				t.Errorf("exec_failures_total = %v, want %v", failures, want)
			}
		})
	}
}

// TestQuitOnALoadedNodeKeepsItsRecord: the quit command is killed with its
// container and the kubelet, busy with a burst of stopping pods, reports
// the stopped proxy only 6 s later (TestNodeKnativeBurst saw more than
// 3 s). With the function's own watch, the quit is still recorded as
// such, not as a failure for good.
func TestQuitOnALoadedNodeKeepsItsRecord(t *testing.T) {
	t.Parallel()
	done := donePod("job-1", "uid-1")
	stopped := podSpec{name: "job-1", uid: "uid-1", policy: corev1.RestartPolicyNever, apps: []string{"app"},
		states: map[string]corev1.ContainerState{"app": exited(0)}, proxy: exited(0)}.pod()
	h := newHarness(t, DefaultConfig(), optedIn, done)
	h.fn.exitWait = exitWait
	var execEnded atomic.Pointer[time.Time]
	h.exec.hook = func(context.Context, execCall) (ExecOutput, error) {
		now := time.Now()
		execEnded.Store(&now)
		return ExecOutput{}, utilexec.CodeExitError{Err: errors.New("command terminated with exit code 137"), Code: 137}
	}
	const reported = 6 * time.Second
	h.client.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if end := execEnded.Load(); end != nil && time.Since(*end) >= reported {
			return true, stopped.DeepCopy(), nil
		}
		return true, done.DeepCopy(), nil
	})

	res := h.fn.Handle(context.Background(), newEvent(t, done))

	if got := codeOf(t, res); got != http.StatusOK {
		t.Errorf("code = %d, want 200 (%v)", got, res)
	}
	kube := strings.Join(h.events(), "\n")
	if !strings.Contains(kube, "Normal ProxyQuit Quit istio-proxy") || strings.Contains(kube, "ProxyQuitFailed") {
		t.Errorf("Kubernetes Events %q, want the ProxyQuit only", kube)
	}
}

func TestQuitWatchStaysWithinTheRequest(t *testing.T) {
	start := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		execTook, want time.Duration
	}{
		{0, exitWait},               // a quit that tore its exec down at once
		{5 * time.Second, exitWait}, // the proxy's drain, then the kill
		{9 * time.Second, 6 * time.Second},
		{DefaultExecTimeout, exitWait / 2}, // the exec's own timeout
		{20 * time.Second, 0},
	} {
		got := quitWatch(start, start.Add(tc.execTook), DefaultExecTimeout, exitWait)
		if got != tc.want {
			t.Errorf("exec took %s: watch %s, want %s", tc.execTook, got, tc.want)
		}
		// The exec, the watch and the Event's write within Knative's 30 s.
		if total := tc.execTook + got + eventTimeout; tc.execTook <= DefaultExecTimeout && total > 28*time.Second {
			t.Errorf("exec took %s: with the watch and the Event %s, over the request's 30 s less the reads", tc.execTook, total)
		}
	}
}

func TestHandleResultWrapsErrInvalid(t *testing.T) {
	h := newHarness(t, DefaultConfig(), optedIn)
	e := newEvent(t, donePod("p", "u"))
	e.SetType("com.example.other")
	if res := h.fn.Handle(context.Background(), e); !errors.Is(res, podevent.ErrInvalid) {
		t.Errorf("result %v does not wrap podevent.ErrInvalid", res)
	}
}

func TestHandleUnknownTypeIsOneMetricLabel(t *testing.T) {
	h := newHarness(t, DefaultConfig(), optedIn)
	for i := range 3 {
		e := newEvent(t, donePod("p", "u"))
		e.SetType(fmt.Sprintf("garbage.%d", i))
		h.fn.Handle(context.Background(), e)
	}
	if got := h.count("other", OutcomeInvalid); got != 3 {
		t.Errorf("events_total{type=other,outcome=invalid} = %v, want 3", got)
	}
}

func ev(p *corev1.Pod) func(t *testing.T) cloudevents.Event {
	return func(t *testing.T) cloudevents.Event { return newEvent(t, p) }
}

// apiServerEvent is what a Knative ApiServerSource in Resource mode sends:
// the full object as data, and ApiServerSource's id and attributes.
func apiServerEvent(typ string, p *corev1.Pod) func(t *testing.T) cloudevents.Event {
	return func(t *testing.T) cloudevents.Event {
		e := cloudevents.NewEvent()
		e.SetID("5c0b6c1e-8d6f-4a55-a0b2-9d0f7c0e0f11")
		e.SetType(typ)
		e.SetSource("https://10.96.0.1:443")
		e.SetSubject(podevent.Subject(p.Namespace, p.Name))
		e.SetExtension("kind", "Pod")
		e.SetExtension("apiversion", "v1")
		e.SetExtension("name", p.Name)
		e.SetExtension("namespace", p.Namespace)
		if err := e.SetData(cloudevents.ApplicationJSON, p); err != nil {
			t.Fatal(err)
		}
		return e
	}
}

func withSidecar(p *corev1.Pod, name string) *corev1.Pod {
	p = p.DeepCopy()
	p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: name})
	p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: name, State: running, Ready: true})
	return p
}

func execCallEqual(a, b execCall) bool {
	return a.Namespace == b.Namespace && a.Pod == b.Pod && a.Container == b.Container && slices.Equal(a.Argv, b.Argv)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
