package scenario

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// scripted is a scenario whose runs do what the script says, in order:
// "pass", "error" (Errorf and go on), "fatal" (Fatalf: nothing after it
// runs), "skip". It notes a namespace named after each run's test name.
type scripted struct {
	script []string
	names  []string
	after  int // statements reached after a failure
}

func (s *scripted) run(t testing.TB) {
	n := len(s.names)
	s.names = append(s.names, t.Name())
	noteNamespace(t, "ns-"+t.Name())
	switch s.script[n] {
	case "error":
		t.Errorf("run %d: an error", n+1)
	case "fatal":
		t.Fatalf("run %d: fatal", n+1)
	case "skip":
		t.Skip("run skipped")
	}
	s.after++
}

func TestRunsWithholdOnlyARuntimeRace(t *testing.T) {
	race := func(namespaces []string) string {
		if len(namespaces) == 0 {
			t.Errorf("the run noted no namespace")
		}
		return "pod ns/p: " + startRace + "ipc"
	}
	noRace := func([]string) string { return "" }
	for _, c := range []struct {
		name   string
		script []string
		race   func([]string) string
		want   outcome
		runs   int
		after  int
	}{
		{"a pass runs once", []string{"pass"}, race, passed, 1, 1},
		{"a failure without the race is the verdict", []string{"error", "pass"}, noRace, failed, 1, 1},
		{"a fatal failure without the race is the verdict", []string{"fatal", "pass"}, noRace, failed, 1, 0},
		{"a failure with the race runs again", []string{"fatal", "pass"}, race, passed, 2, 1},
		{"the second run's failure is the verdict", []string{"error", "error", "pass"}, race, failed, 2, 2},
		{"a skip is a skip", []string{"skip"}, noRace, skipped, 1, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := &scripted{script: c.script}
			if got := runs(t, s.run, c.race); got != c.want {
				t.Errorf("outcome %d, want %d", got, c.want)
			}
			if len(s.names) != c.runs || s.after != c.after {
				t.Errorf("%d runs (%v), %d statements after a failure reached; want %d, %d", len(s.names), s.names, s.after, c.runs, c.after)
			}
			if t.Failed() {
				t.Fatal("a run's failure reached the test itself")
			}
			if c.runs == 2 && (s.names[0] != t.Name() || s.names[1] != t.Name()+"/again") {
				t.Errorf("runs named %v: want the second in namespaces of its own", s.names)
			}
		})
	}
}

func TestRaceIn(t *testing.T) {
	pod := corev1.ObjectReference{Kind: "Pod", Namespace: "testnodeneverfailingapp", Name: "failing-kbj6m"}
	// The Event CI's real node wrote (stop 48).
	race := corev1.Event{InvolvedObject: pod, Type: corev1.EventTypeWarning, Reason: "Failed",
		Message: "Error: failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create failed: unable to create new parent process: namespace path: lstat /proc/0/ns/ipc: no such file or directory: unknown"}
	other := race
	other.Message = "Error: failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: exec: \"pilot-agent\": executable file not found in $PATH: unknown"
	started := corev1.Event{InvolvedObject: pod, Type: corev1.EventTypeNormal, Reason: "Started", Message: "Container started"}
	if why := raceIn([]corev1.Event{started, other}); why != "" {
		t.Errorf("another start failure taken for the race: %s", why)
	}
	why := raceIn([]corev1.Event{started, other, race})
	if !strings.Contains(why, "testnodeneverfailingapp/failing-kbj6m") || !strings.Contains(why, "/proc/0/ns/ipc") {
		t.Errorf("the race: %q", why)
	}
}
