package proxyquit

import (
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/pkg/podevent"
	"github.com/istio-aux/istio-aux/pkg/slim"
	"github.com/istio-aux/istio-aux/test/record"
)

// Checks that recordings contain what their scenario claims; each reads
// the recorded pods directly, not through the code under test.

func status(p *slim.Pod, name string) (slim.ContainerStatus, bool) {
	for _, ss := range []slim.Statuses{p.Status.ContainerStatuses, p.Status.InitContainerStatuses} {
		for _, s := range ss {
			if s.Name == name {
				return s, true
			}
		}
	}
	return slim.ContainerStatus{}, false
}

// inState returns the events in a state.
func inState(evs []recorded, state string) []recorded {
	var out []recorded
	for _, ev := range evs {
		if ev.state == state {
			out = append(out, ev)
		}
	}
	return out
}

func checkMnist(t *testing.T, evs []recorded) {
	for _, ev := range evs {
		p := ev.pod
		if p.Spec.RestartPolicy != corev1.RestartPolicyOnFailure || len(p.Spec.Containers) != 2 ||
			p.Spec.Containers[0].Name != keys.ProxyContainer || p.Spec.Containers[1].Name != "tensorflow" {
			t.Errorf("%s: not an injected TFJob worker (OnFailure; istio-proxy first, then tensorflow): %+v", ev.file, p.Spec)
		}
	}
	for _, ev := range inState(evs, record.StateInit) {
		if s, _ := status(ev.pod, "istio-init"); s.State.Running == nil {
			t.Errorf("%s: istio-init is not running", ev.file)
		}
	}
	for _, ev := range inState(evs, "1of2") {
		proxy, _ := status(ev.pod, keys.ProxyContainer)
		app, _ := status(ev.pod, "tensorflow")
		if !proxy.Ready || app.State.Waiting == nil {
			t.Errorf("%s: want istio-proxy ready and tensorflow held back, got %+v / %+v", ev.file, proxy.State, app.State)
		}
	}
	for _, ev := range inState(evs, record.StateAppsDone) {
		app, _ := status(ev.pod, "tensorflow")
		proxy, _ := status(ev.pod, keys.ProxyContainer)
		if app.State.Terminated == nil || app.State.Terminated.ExitCode != 0 || proxy.State.Running == nil {
			t.Errorf("%s: want tensorflow exited 0 and istio-proxy running", ev.file)
		}
	}
}

// checkFullPods: ApiServerSource delivers whole pods, first an add.
func checkFullPods(t *testing.T, evs []recorded) {
	checkMnist(t, evs)
	seen := map[string]bool{}
	for _, ev := range evs {
		want := podevent.TypeAPIServerUpdate
		if !seen[ev.pod.Name] {
			want = podevent.TypeAPIServerAdd
		}
		seen[ev.pod.Name] = true
		if ev.event.Type() != want {
			t.Errorf("%s: type %s, want %s", ev.file, ev.event.Type(), want)
		}
		var raw map[string]any
		if err := json.Unmarshal(ev.event.Data(), &raw); err != nil {
			t.Fatalf("%s: %v", ev.file, err)
		}
		meta, _ := raw["metadata"].(map[string]any)
		if raw["kind"] != "Pod" || raw["apiVersion"] != "v1" || meta["managedFields"] == nil || meta["creationTimestamp"] == nil {
			t.Errorf("%s: data is not a whole pod as the API returns it", ev.file)
		}
		for _, ext := range []string{podevent.ExtKind, podevent.ExtAPIVersion, podevent.ExtName, podevent.ExtNamespace} {
			if ev.event.Extensions()[ext] == nil {
				t.Errorf("%s: no %s extension", ev.file, ext)
			}
		}
	}
}

func checkOnFailure(t *testing.T, evs []recorded) {
	failed := inState(evs, record.StateAppFailed)
	done := inState(evs, record.StateAppsDone)
	if len(failed) == 0 || len(done) == 0 {
		t.Fatalf("want a failed attempt and a success, got %d and %d events", len(failed), len(done))
	}
	if s, _ := status(failed[0].pod, "download"); s.RestartCount != 0 || s.State.Terminated.ExitCode != 1 {
		t.Errorf("%s: want restartCount 0 exit 1, got %d %+v", failed[0].file, s.RestartCount, s.State.Terminated)
	}
	if s, _ := status(done[0].pod, "download"); s.RestartCount != 1 || s.State.Terminated.ExitCode != 0 {
		t.Errorf("%s: want restartCount 1 exit 0, got %d %+v", done[0].file, s.RestartCount, s.State.Terminated)
	}
	if failed[0].file > done[0].file {
		t.Errorf("the failure %s comes after the success %s", failed[0].file, done[0].file)
	}
}

func checkNeverFailing(t *testing.T, evs []recorded) {
	for _, ev := range inState(evs, record.StateAppsDone) {
		s, _ := status(ev.pod, "migrate")
		if ev.pod.Spec.RestartPolicy != corev1.RestartPolicyNever || s.State.Terminated.ExitCode != 1 {
			t.Errorf("%s: want restartPolicy Never and exit 1, got %s %+v", ev.file, ev.pod.Spec.RestartPolicy, s.State.Terminated)
		}
	}
}

func checkTwoApps(t *testing.T, evs []recorded) {
	done := inState(evs, record.StateAppsDone)
	if len(done) == 0 {
		t.Fatal("no apps-done event")
	}
	trainer, _ := status(done[0].pod, "trainer")
	uploader, _ := status(done[0].pod, "uploader")
	if !trainer.State.Terminated.FinishedAt.Before(&uploader.State.Terminated.FinishedAt) {
		t.Errorf("%s: trainer finished %v, uploader %v: not at different times", done[0].file,
			trainer.State.Terminated.FinishedAt, uploader.State.Terminated.FinishedAt)
	}
}

func checkNative(t *testing.T, evs []recorded) {
	for _, ev := range evs {
		p := ev.pod
		native := len(p.Spec.InitContainers) == 1 && p.Spec.InitContainers[0].Name == keys.ProxyContainer &&
			p.Spec.InitContainers[0].RestartPolicy != nil && *p.Spec.InitContainers[0].RestartPolicy == corev1.ContainerRestartPolicyAlways
		for _, c := range p.Spec.Containers {
			native = native && c.Name != keys.ProxyContainer
		}
		if !native {
			t.Errorf("%s: istio-proxy is not a native sidecar", ev.file)
		}
	}
}

func checkDeletedMidRun(t *testing.T, evs []recorded) {
	deleting := inState(evs, record.StateDeleting)
	if len(deleting) == 0 {
		t.Fatal("no deleting event")
	}
	if s, _ := status(deleting[0].pod, "app"); s.State.Running == nil {
		t.Errorf("%s: the app was not running when the pod was deleted: %+v", deleting[0].file, s.State)
	}
	for _, ev := range evs {
		if ev.state == record.StateAppsDone {
			t.Errorf("%s: the app finished before the deletion", ev.file)
		}
	}
}

// checkContainerPolicy: the recorded pod has the pod policy and its app
// the container policy given, the app's first attempt exited firstExit,
// and it restarted restarts times before it was done for good.
func checkContainerPolicy(pod corev1.RestartPolicy, app corev1.ContainerRestartPolicy, firstExit int32, restarts int32) func(*testing.T, []recorded) {
	return func(t *testing.T, evs []recorded) {
		var sawFirst, sawDone bool
		for _, ev := range evs {
			p := ev.pod
			if p.Spec.RestartPolicy != pod || len(p.Spec.Containers) != 2 {
				t.Fatalf("%s: pod policy %s, %d containers", ev.file, p.Spec.RestartPolicy, len(p.Spec.Containers))
			}
			for _, c := range p.Spec.Containers {
				if c.Name != keys.ProxyContainer && (c.RestartPolicy == nil || *c.RestartPolicy != app) {
					t.Fatalf("%s: app %s restartPolicy %v, want %s", ev.file, c.Name, c.RestartPolicy, app)
				}
			}
			s, ok := status(p, "tensorflow")
			if !ok || s.State.Terminated == nil {
				continue
			}
			if s.RestartCount == 0 && s.State.Terminated.ExitCode == firstExit {
				sawFirst = true
			}
			if s.RestartCount == restarts && ev.state == record.StateAppsDone {
				sawDone = true
			}
		}
		if !sawFirst || !sawDone {
			t.Errorf("first attempt exiting %d seen: %v; done after %d restarts seen: %v", firstExit, sawFirst, restarts, sawDone)
		}
	}
}
