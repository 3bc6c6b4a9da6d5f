//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/test/istio"
	"github.com/istio-aux/istio-aux/test/mesh"
)

// mergeRow is a row of webhook/admission/testdata/merge.json (the webhook's merge
// table, whose webhook half TestMutate checks); see mergeRow there.
type mergeRow struct {
	Name              string         `json:"name"`
	Config            *string        `json:"config"`
	Outcome           string         `json:"outcome"`
	Want              string         `json:"want"`
	Istiod            string         `json:"istiod"`
	IstiodProxyConfig map[string]any `json:"istiodProxyConfig"`
}

// warnings collects the admission warnings the API server returns.
type warnings struct {
	mu   sync.Mutex
	seen []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = append(w.seen, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.seen
	w.seen = nil
	return s
}

// TestWebhookOutputThroughIstiod: every row of the webhook's merge table,
// created (as a dry run) through istio-aux's webhook and then the real
// istiod. Where the webhook adds the hold, istiod accepts the pod, puts
// istio-proxy first with its postStart wait and keeps the user's settings;
// where the webhook leaves the user's value, istiod does what the row says
// (the hold or not, or a refusal), and the webhook's admission warning is
// there exactly when the row says it warns.
func TestWebhookOutputThroughIstiod(t *testing.T) {
	withIstioAux(t)
	raw, err := os.ReadFile("../../webhook/admission/testdata/merge.json")
	if err != nil {
		t.Fatal(err)
	}
	var rows []mergeRow
	if err := json.Unmarshal(raw, &rows); err != nil {
		t.Fatal(err)
	}
	ns := mesh.Namespace(t, env, "", true, mesh.OptedIn)
	w := &warnings{}
	rc := env.RESTConfig()
	rc.WarningHandler = w
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		t.Run(r.Name, func(t *testing.T) {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{GenerateName: "merge-"},
				Spec: corev1.PodSpec{ServiceAccountName: istio.ServiceAccount, RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{Name: "app", Image: "app"}}},
			}
			if r.Config != nil {
				pod.Annotations = map[string]string{keys.AnnotationProxyConfig: *r.Config}
			}
			w.take()
			got, err := cs.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			ours := 0
			for _, text := range w.take() {
				if strings.Contains(text, "istio-aux") {
					ours++
				}
			}
			if warned := r.Outcome == "warned"; warned != (ours > 0) {
				t.Errorf("%d warnings from istio-aux, want them: %v", ours, warned)
			}
			if r.Istiod == "rejected" {
				if err == nil {
					t.Fatalf("istiod accepted the pod; the row says Istio rejects %q", r.Want)
				}
				t.Logf("refused: %v", err)
				return
			}
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if a := got.Annotations[keys.AnnotationProxyConfig]; a != r.Want {
				t.Errorf("proxy.istio.io/config = %q, want %q", a, r.Want)
			}
			proxy, first := injectedProxy(got)
			if proxy == nil {
				t.Fatal("no istio-proxy injected")
			}
			waits := proxy.Lifecycle != nil && proxy.Lifecycle.PostStart != nil && proxy.Lifecycle.PostStart.Exec != nil &&
				strings.Contains(strings.Join(proxy.Lifecycle.PostStart.Exec.Command, " "), "pilot-agent wait")
			if hold := r.Istiod == "hold"; first != hold || waits != hold {
				t.Errorf("istio-proxy first %v, postStart wait %v; want both %v", first, waits, hold)
			}
			pc := map[string]any{}
			for _, e := range proxy.Env {
				if e.Name == "PROXY_CONFIG" {
					if err := json.Unmarshal([]byte(e.Value), &pc); err != nil {
						t.Fatalf("PROXY_CONFIG: %v", err)
					}
				}
			}
			for k, want := range r.IstiodProxyConfig {
				if !contains(pc[k], want) {
					t.Errorf("PROXY_CONFIG[%s] = %v, want %v in it", k, pc[k], want)
				}
			}
		})
	}
}

// injectedProxy is the regular istio-proxy container and whether it is
// the first one.
func injectedProxy(p *corev1.Pod) (*corev1.Container, bool) {
	for i := range p.Spec.Containers {
		if p.Spec.Containers[i].Name == keys.ProxyContainer {
			return &p.Spec.Containers[i], i == 0
		}
	}
	return nil, false
}

// contains reports whether got has want's fields with want's values
// (numbers compared as JSON decodes them).
func contains(got, want any) bool {
	wm, ok := want.(map[string]any)
	if !ok {
		return reflect.DeepEqual(got, want)
	}
	gm, ok := got.(map[string]any)
	if !ok {
		return false
	}
	for k, v := range wm {
		if !contains(gm[k], v) {
			return false
		}
	}
	return true
}
