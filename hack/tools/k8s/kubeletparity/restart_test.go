// Package kubeletparity checks istio-aux's copy of the kubelet's restart
// rule (pkg/decision.WillRestart, for a Kubelet of each version) against
// each kubelet's own ShouldContainerBeRestarted (k8s.io/kubernetes
// pkg/kubelet/container), through a case table both read:
// pkg/decision/testdata/kubelet-restart.json, one column of answers per
// kubelet minor. The same source compiles against every version: run with
// `go test -modfile=v1.32.mod ./kubeletparity/` for 1.32 (go.mod is the
// newest); -update fills in that version's column. pkg/decision's
// TestWillRestartMatchesTheKubelet replays every column against WillRestart
// in make test. It lives in the Kubernetes tools module so that istio-aux's
// own module never requires k8s.io/kubernetes.
package kubeletparity

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	kubecontainer "k8s.io/kubernetes/pkg/kubelet/container"
)

var update = flag.Bool("update", false, "rewrite this kubelet's column of the table from its own function")

// Case is one row of the table. Container is JSON, decoded by each kubelet
// into its own version's API types: a field it does not know (a container's
// restartPolicyRules before 1.34) is dropped, as when it reads a pod from a
// newer API server.
type Case struct {
	Pod       corev1.RestartPolicy `json:"pod"`
	Container json.RawMessage      `json:"container"`
	ExitCode  int32                `json:"exitCode"`
	// Kubelets are the answers, restart or not, by kubelet minor ("1.32").
	Kubelets map[string]bool `json:"kubelets"`
}

var table = filepath.Join("..", "..", "..", "..", "pkg", "decision", "testdata", "kubelet-restart.json")

func TestTableMatchesTheKubelet(t *testing.T) {
	minor := kubeletMinor(t)
	want := inputs(t)
	var cases []Case
	raw, err := os.ReadFile(table)
	if err == nil {
		err = json.Unmarshal(raw, &cases)
	}
	if err != nil && !*update {
		t.Fatal(err)
	}
	if !sameInputs(cases, want) {
		if !*update {
			t.Fatalf("the table's %d cases are not the inputs' %d: run go test -update with every module file", len(cases), len(want))
		}
		cases = want // every column is written again, one version at a time
	}
	for i, c := range cases {
		var ctr corev1.Container
		if err := json.Unmarshal(c.Container, &ctr); err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		ctr.Name = "app"
		got := shouldRestart(&ctr, c.Pod, c.ExitCode)
		if *update {
			if cases[i].Kubelets == nil {
				cases[i].Kubelets = map[string]bool{}
			}
			cases[i].Kubelets[minor] = got
		} else if w, ok := c.Kubelets[minor]; !ok || got != w {
			t.Errorf("case %d (pod %s, container %s, exit %d): kubelet %s says restart=%v, the table %v (present %v)",
				i, c.Pod, c.Container, c.ExitCode, minor, got, w, ok)
		}
	}
	if *update {
		write(t, cases)
	}
}

// shouldRestart asks this version's kubelet whether it runs again a
// container that exited with code, by the function its sync loop calls.
// Its signature changed (a logger came first in 1.35): reflection calls
// either, so that one source compiles against every version.
func shouldRestart(c *corev1.Container, policy corev1.RestartPolicy, code int32) bool {
	pod := &corev1.Pod{Spec: corev1.PodSpec{RestartPolicy: policy, Containers: []corev1.Container{*c}}}
	status := &kubecontainer.PodStatus{ContainerStatuses: []*kubecontainer.Status{
		{Name: c.Name, State: kubecontainer.ContainerStateExited, ExitCode: int(code)},
	}}
	fn := reflect.ValueOf(kubecontainer.ShouldContainerBeRestarted)
	args := []reflect.Value{reflect.ValueOf(c), reflect.ValueOf(pod), reflect.ValueOf(status)}
	if fn.Type().NumIn() == 4 {
		args = append([]reflect.Value{reflect.ValueOf(klog.Background())}, args...)
	}
	return fn.Call(args)[0].Bool()
}

// kubeletMinor is the k8s.io/kubernetes this test was built with, "1.MM",
// read from where the kubelet's function was compiled from: a module's
// files are named module@version/... (or sit under that directory of the
// module cache), whichever module file the build read.
func kubeletMinor(t *testing.T) string {
	file, _ := runtime.FuncForPC(reflect.ValueOf(kubecontainer.ShouldContainerBeRestarted).Pointer()).FileLine(0)
	m := regexp.MustCompile(`k8s\.io/kubernetes@v1\.(\d+)\.`).FindStringSubmatch(file)
	if m == nil {
		t.Fatalf("cannot tell the kubelet's version from %s", file)
	}
	t.Logf("kubelet 1.%s, from %s", m[1], file)
	return "1." + m[1]
}

// sameInputs reports whether the table's rows are the inputs, in order.
func sameInputs(cases, inputs []Case) bool {
	if len(cases) != len(inputs) {
		return false
	}
	for i := range cases {
		if cases[i].Pod != inputs[i].Pod || cases[i].ExitCode != inputs[i].ExitCode || !jsonEqual(cases[i].Container, inputs[i].Container) {
			return false
		}
	}
	return true
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

// inputs crosses every pod policy, container policy, rule list and exit
// code that reaches a distinct branch of the newest kubelet's
// ContainerShouldRestart, written as JSON so that every version's API types
// read them.
func inputs(t *testing.T) []Case {
	rule := func(action, op string, codes ...int32) map[string]any {
		return map[string]any{"action": action, "exitCodes": map[string]any{"operator": op, "values": codes}}
	}
	const restart, all, in, notIn = "Restart", "RestartAllContainers", "In", "NotIn"
	ruleSets := [][]map[string]any{
		nil,
		{rule(restart, in, 42)},
		{rule(restart, notIn, 0)},
		{rule(restart, in, 0)},
		{rule(all, in, 42)},
		{rule("Unknown", in, 42)},
		{rule(restart, "Unknown", 42)},
		{{"action": restart}},
		{rule(restart, in)},
		{rule(restart, notIn)},
		{rule(restart, in, 1), rule(all, in, 42)},
		{rule(all, in, 42), rule(restart, in, 42)},
		{rule("Unknown", in, 42), rule(restart, in, 42)},
	}
	var out []Case
	for _, pod := range []corev1.RestartPolicy{corev1.RestartPolicyAlways, corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever, "", "Unknown"} {
		for _, cp := range []string{"", "Always", "OnFailure", "Never", "Unknown"} {
			for _, rules := range ruleSets {
				for _, code := range []int32{0, 1, 42} {
					ctr := map[string]any{}
					if cp != "" {
						ctr["restartPolicy"] = cp
					}
					if rules != nil {
						ctr["restartPolicyRules"] = rules
					}
					raw, err := json.Marshal(ctr)
					if err != nil {
						t.Fatal(err)
					}
					out = append(out, Case{Pod: pod, Container: raw, ExitCode: code})
				}
			}
		}
	}
	return out
}

// write rewrites the table, one case a line: a diff reads as a list of
// cases.
func write(t *testing.T, cases []Case) {
	var b bytes.Buffer
	b.WriteString("[\n")
	for i, c := range cases {
		line, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		if i < len(cases)-1 {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
	}
	b.WriteString("]\n")
	if err := os.WriteFile(table, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(os.Stderr, "wrote %d cases to %s\n", len(cases), table)
}
