package slim

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/pkg/keys"
)

// rich is a slim pod in which every field has a value that is not its zero
// somewhere (TestRichSetsEveryField holds it to that).
func rich() *Pod {
	at := metav1.Unix(1_700_000_000, 0) // whole seconds: the API's precision
	onFailure := corev1.ContainerRestartPolicyOnFailure
	always := corev1.ContainerRestartPolicyAlways
	rules := Rules{{Action: corev1.ContainerRestartRuleActionRestart,
		ExitCodes: &ExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: Codes{42, 43}}}}
	return &Pod{
		APIVersion: "v1", Kind: "Pod",
		Meta: Meta{Name: "p", Namespace: "ns", UID: "u", ResourceVersion: "7", DeletionTimestamp: &at,
			Labels:      Kept{keys.LabelEnabled: "true"},
			Annotations: Kept{keys.AnnotationEnabled: "true", keys.AnnotationSidecars: "vault-agent"}},
		Spec: Spec{RestartPolicy: corev1.RestartPolicyNever,
			InitContainers: Containers{{Name: "istio-proxy", RestartPolicy: &always, RestartPolicyRules: rules}},
			Containers:     Containers{{Name: "app", RestartPolicy: &onFailure, RestartPolicyRules: rules}}},
		Status: Status{Phase: corev1.PodRunning,
			InitContainerStatuses: Statuses{
				{Name: "istio-proxy", Ready: true, RestartCount: 1, State: State{Running: &Running{StartedAt: at}}},
				{Name: "init", State: State{Waiting: &Waiting{Reason: "PodInitializing"}}, LastState: LastState{Terminated: &LastTerminated{ExitCode: 126}}},
				{Name: "setup", State: State{Terminated: &Terminated{ExitCode: 2, Reason: "Error", FinishedAt: at}}}},
			ContainerStatuses: Statuses{
				{Name: "app", Ready: true, RestartCount: 2, State: State{Terminated: &Terminated{ExitCode: 1, Reason: "Error", FinishedAt: at}}},
				{Name: "waiting", State: State{Waiting: &Waiting{Reason: "CrashLoopBackOff"}}, LastState: LastState{Terminated: &LastTerminated{ExitCode: 126}}},
				{Name: "running", State: State{Running: &Running{StartedAt: at}}}}},
	}
}

// TestRichSetsEveryField fails when a field is added to the slim pod without
// a value in rich(), so that the round trip below covers it.
func TestRichSetsEveryField(t *testing.T) {
	set := map[string]bool{} // field path -> non-zero somewhere
	var walk func(path string, v reflect.Value)
	walk = func(path string, v reflect.Value) {
		set[path] = set[path] || !v.IsZero()
		if v.IsZero() {
			return
		}
		switch v.Kind() {
		case reflect.Pointer:
			walk(path, v.Elem())
		case reflect.Struct:
			if v.Type() == reflect.TypeOf(metav1.Time{}) {
				return
			}
			for i := range v.NumField() {
				walk(path+"."+v.Type().Field(i).Name, v.Field(i))
			}
		case reflect.Slice:
			for i := range v.Len() {
				walk(path+"[]", v.Index(i))
			}
		}
	}
	walk("Pod", reflect.ValueOf(rich()))
	// Every field path of the type, whether or not rich() reached it.
	var all func(path string, t reflect.Type)
	all = func(path string, t reflect.Type) {
		if !set[path] {
			t0 := path
			set[t0] = false
		}
		switch t.Kind() {
		case reflect.Pointer, reflect.Slice:
			all(path+map[bool]string{true: "[]", false: ""}[t.Kind() == reflect.Slice], t.Elem())
		case reflect.Struct:
			if t == reflect.TypeOf(metav1.Time{}) {
				return
			}
			for i := range t.NumField() {
				all(path+"."+t.Field(i).Name, t.Field(i).Type)
			}
		}
	}
	all("Pod", reflect.TypeOf(Pod{}))
	for path, ok := range set {
		if !ok {
			t.Errorf("rich() leaves %s zero everywhere: give it a value", path)
		}
	}
}

// TestRoundTripKeepsWhatTheDecisionReads carries every field of the slim
// pod through every path a pod takes here: a full v1.Pod with the same
// fields (Of) and the event payload (JSON, decoded with the bounds); the
// bridge's cache has its own (bridge/watch TestPackUnpacks). Each must give
// back exactly the slim pod.
func TestRoundTripKeepsWhatTheDecisionReads(t *testing.T) {
	want := rich()
	raw, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	var back Pod
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, &back); d != "" {
		t.Errorf("JSON (-want +got):\n%s", d)
	}

	// The same JSON read as a v1.Pod, then slimmed: every slim field has the
	// v1.Pod's field name, and Of copies it.
	var full corev1.Pod
	if err := json.Unmarshal(raw, &full); err != nil {
		t.Fatal(err)
	}
	full.Labels["other"] = "dropped"
	full.Annotations["kubectl.kubernetes.io/last-applied-configuration"] = "dropped"
	if d := cmp.Diff(want, Of(&full)); d != "" {
		t.Errorf("Of (-want +got):\n%s", d)
	}
}
