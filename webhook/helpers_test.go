package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fakekube "knative.dev/pkg/client/injection/kube/client/fake"
	_ "knative.dev/pkg/client/injection/kube/informers/admissionregistration/v1/mutatingwebhookconfiguration/fake"
	fakensinformer "knative.dev/pkg/client/injection/kube/informers/core/v1/namespace/fake"
	"knative.dev/pkg/configmap"
	_ "knative.dev/pkg/injection/clients/namespacedkube/informers/core/v1/secret/fake"
	rtesting "knative.dev/pkg/reconciler/testing"
	"knative.dev/pkg/system"
	knwebhook "knative.dev/pkg/webhook"

	"github.com/istio-aux/istio-aux/pkg/names"
	"github.com/istio-aux/istio-aux/webhook/admission"
)

// fixture is a reconciler built by NewController on knative's fake
// injection context, counting on a registry of its own.
type fixture struct {
	ctx context.Context
	r   *reconciler
	reg *prometheus.Registry
}

// newFixture builds the controller with the given namespaces (in both the
// fake API and the informer cache) and ConfigMap watcher (nil: a static
// empty config-istio-aux).
func newFixture(t testing.TB, cmw configmap.Watcher, namespaces ...*corev1.Namespace) *fixture {
	t.Helper()
	ctx, _ := rtesting.SetupFakeContext(t, func(ctx context.Context) context.Context {
		return knwebhook.WithOptions(ctx, knwebhook.Options{SecretName: names.WebhookSecret, ServiceName: names.WebhookService})
	})
	for _, ns := range namespaces {
		if _, err := fakekube.Get(ctx).CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := fakensinformer.Get(ctx).Informer().GetIndexer().Add(ns); err != nil {
			t.Fatal(err)
		}
	}
	if cmw == nil {
		cmw = configmap.NewStaticWatcher(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: names.ConfigMap, Namespace: system.Namespace()}})
	}
	impl := NewController(ctx, cmw)
	r, ok := impl.Reconciler.(*reconciler)
	if !ok {
		t.Fatalf("reconciler is a %T", impl.Reconciler)
	}
	reg := prometheus.NewRegistry()
	r.metrics = newMetrics(reg)
	return &fixture{ctx: ctx, r: r, reg: reg}
}

// counts returns the admissions counter by outcome.
func (f *fixture) counts(t testing.TB) map[admission.Outcome]int64 {
	t.Helper()
	families, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[admission.Outcome]int64{}
	for _, fam := range families {
		if fam.GetName() != MetricAdmissions {
			continue
		}
		for _, m := range fam.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" {
					out[admission.Outcome(l.GetValue())] += int64(m.GetCounter().GetValue())
				}
			}
		}
	}
	return out
}

// handler is the fixture's reconciler behind the webhook's HTTP handler,
// its informers counted as synced, its requests in f.ctx (for the logger)
// as the Server's are in NewController's.
func (f *fixture) handler() http.Handler {
	synced := make(chan struct{})
	close(synced)
	h := newHandler(f.r.Review, synced, f.r.metrics)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeHTTP(w, r.WithContext(f.ctx)) })
}

// admit answers req as the webhook does when the API server sends it:
// through the AdmissionReview's bytes (Review), HTTP aside.
func admit(tb testing.TB, ctx context.Context, r *reconciler, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	tb.Helper()
	return answer(tb, reviewOK(tb, ctx, r, reviewBody(tb, req)))
}

// reviewOK runs Review on body and fails tb if it is not an AdmissionReview.
// No tb.Helper: measurement loops call it, and Helper's bookkeeping would be
// timed with it.
func reviewOK(tb testing.TB, ctx context.Context, r *reconciler, body []byte) []byte {
	out, err := r.Review(ctx, body)
	if err != nil {
		tb.Fatalf("Review: %v", err)
	}
	return out
}

// answer decodes the AdmissionReview the webhook sent back.
func answer(tb testing.TB, out []byte) *admissionv1.AdmissionResponse {
	tb.Helper()
	var rv admissionv1.AdmissionReview
	if err := json.Unmarshal(out, &rv); err != nil || rv.Response == nil {
		tb.Fatalf("answer %s: %v", out, err)
	}
	return rv.Response
}

// reviewBody is the AdmissionReview the API server sends for req (no
// request when nil), with req.Object.Raw as the object byte for byte, JSON
// or not (nil: null).
func reviewBody(tb testing.TB, req *admissionv1.AdmissionRequest) []byte {
	tb.Helper()
	head := []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"`)
	if req == nil {
		return append(head, '}')
	}
	r := *req
	r.Object = runtime.RawExtension{}
	b, err := json.Marshal(&r)
	if err != nil {
		tb.Fatal(err)
	}
	object := req.Object.Raw
	if object == nil {
		object = []byte("null")
	}
	b = bytes.Replace(b, []byte(`"object":null`), append([]byte(`"object":`), object...), 1)
	return append(append(append(head, `,"request":`...), b...), '}')
}

// serveReview posts body to h as the API server does and returns the
// answer; a status other than 200 fails. No tb.Helper: BenchmarkHandler
// calls it in its loop.
func serveReview(tb testing.TB, h http.Handler, body []byte) *httptest.ResponseRecorder {
	hr := httptest.NewRequest(http.MethodPost, admission.Path+"?timeout=5s", bytes.NewReader(body))
	hr.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, hr)
	if rec.Code != http.StatusOK {
		tb.Fatalf("webhook answered %d: %s", rec.Code, rec.Body)
	}
	return rec
}

func namespace(name string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

// fakens returns the fake namespace informer's cache.
func fakens(f *fixture) interface{ Add(any) error } {
	return fakensinformer.Get(f.ctx).Informer().GetIndexer()
}

// touchesAnnotations reports whether a JSON patch from the webhook sets an
// annotation (the hold or the native sidecar), as opposed to only the label
// keys.LabelWatched, which rides along whatever the annotation's outcome.
func touchesAnnotations(t testing.TB, patch []byte) bool {
	t.Helper()
	if patch == nil {
		return false
	}
	var ops []struct {
		Path  string          `json:"path"`
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(patch, &ops); err != nil {
		t.Fatalf("patch %s: %v", patch, err)
	}
	for _, op := range ops {
		if strings.HasPrefix(op.Path, "/metadata/annotations") ||
			(op.Path == "/metadata" && bytes.Contains(op.Value, []byte(`"annotations":`))) {
			return true
		}
	}
	return false
}
