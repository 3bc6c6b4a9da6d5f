package webhook

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fakekube "knative.dev/pkg/client/injection/kube/client/fake"
	_ "knative.dev/pkg/client/injection/kube/informers/admissionregistration/v1/mutatingwebhookconfiguration/fake"
	fakensinformer "knative.dev/pkg/client/injection/kube/informers/core/v1/namespace/fake"
	"knative.dev/pkg/configmap"
	_ "knative.dev/pkg/injection/clients/namespacedkube/informers/core/v1/secret/fake"
	rtesting "knative.dev/pkg/reconciler/testing"
	"knative.dev/pkg/system"
	knwebhook "knative.dev/pkg/webhook"
)

// fixture is a reconciler built by NewController on knative's fake
// injection context, plus a metric reader to assert what it counted.
type fixture struct {
	ctx    context.Context
	r      *reconciler
	reader *sdkmetric.ManualReader
}

// newFixture builds the controller with the given namespaces (in both the
// fake API and the informer cache) and ConfigMap watcher (nil: a static
// empty config-istio-aux).
func newFixture(t testing.TB, cmw configmap.Watcher, namespaces ...*corev1.Namespace) *fixture {
	t.Helper()
	ctx, _ := rtesting.SetupFakeContext(t, func(ctx context.Context) context.Context {
		return knwebhook.WithOptions(ctx, knwebhook.Options{SecretName: SecretName, ServiceName: ConfigurationName})
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
		cmw = configmap.NewStaticWatcher(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: ConfigMapName, Namespace: system.Namespace()}})
	}
	impl := NewController(ctx, cmw)
	r, ok := impl.Reconciler.(*reconciler)
	if !ok {
		t.Fatalf("reconciler is a %T", impl.Reconciler)
	}
	reader := sdkmetric.NewManualReader()
	r.metrics = newMetrics(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	return &fixture{ctx: ctx, r: r, reader: reader}
}

// counts returns the admissions counter by outcome.
func (f *fixture) counts(t testing.TB) map[Outcome]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := f.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[Outcome]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok || m.Name != "istio_aux.webhook.admissions" {
				continue
			}
			for _, dp := range sum.DataPoints {
				v, _ := dp.Attributes.Value("outcome")
				out[Outcome(v.AsString())] += dp.Value
			}
		}
	}
	return out
}

func namespace(name string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

// fakens returns the fake namespace informer's cache.
func fakens(f *fixture) interface{ Add(any) error } {
	return fakensinformer.Get(f.ctx).Informer().GetIndexer()
}
