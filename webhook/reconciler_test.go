package webhook

import (
	"bytes"
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	fakekube "knative.dev/pkg/client/injection/kube/client/fake"
	fakemwh "knative.dev/pkg/client/injection/kube/informers/admissionregistration/v1/mutatingwebhookconfiguration/fake"
	"knative.dev/pkg/configmap/informer"
	"knative.dev/pkg/controller"
	fakesecret "knative.dev/pkg/injection/clients/namespacedkube/informers/core/v1/secret/fake"
	pkgreconciler "knative.dev/pkg/reconciler"
	"knative.dev/pkg/system"
	certresources "knative.dev/pkg/webhook/certificates/resources"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/pkg/names"
	"github.com/istio-aux/istio-aux/webhook/admission"
	"github.com/istio-aux/istio-aux/webhook/admission/admissiontest"
)

var caCert = []byte("-----BEGIN CERTIFICATE-----\nfake\n-----END CERTIFICATE-----\n")

func serviceConfig() admissionregistrationv1.WebhookClientConfig {
	return admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
		Namespace: "istio-aux", Name: names.WebhookConfiguration, Port: ptr.To(int32(443)),
	}}
}

func urlConfig() admissionregistrationv1.WebhookClientConfig {
	return admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:38443/mutate-pods")}
}

// asWritten is a configuration as the YAML declares it: selectors and client
// config, none of what the reconciler owns.
func asWritten(cc admissionregistrationv1.WebhookClientConfig) *admissionregistrationv1.MutatingWebhookConfiguration {
	whs := admission.Webhooks(system.Namespace(), cc)
	for i := range whs {
		whs[i].Rules, whs[i].FailurePolicy, whs[i].SideEffects = nil, nil, nil
		whs[i].TimeoutSeconds, whs[i].ReinvocationPolicy = nil, nil
		if whs[i].ClientConfig.Service != nil {
			whs[i].ClientConfig.Service.Path = nil
		}
	}
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: names.WebhookConfiguration},
		Webhooks:   whs,
	}
}

// reconcileWith installs the objects in the fake API and caches, promotes the
// reconciler and runs one Reconcile, returning the stored configuration.
func reconcileWith(t *testing.T, mwh *admissionregistrationv1.MutatingWebhookConfiguration, secretData map[string][]byte) (*admissionregistrationv1.MutatingWebhookConfiguration, *fixture, error) {
	t.Helper()
	f := newFixture(t, nil, namespace(system.Namespace(), nil))
	ctx := f.ctx
	kc := fakekube.Get(ctx)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: names.WebhookSecret, Namespace: system.Namespace()}, Data: secretData}
	if err := fakesecret.Get(ctx).Informer().GetIndexer().Add(secret); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mwh, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := fakemwh.Get(ctx).Informer().GetIndexer().Add(mwh); err != nil {
		t.Fatal(err)
	}
	if err := f.r.Promote(pkgreconciler.UniversalBucket(), func(pkgreconciler.Bucket, types.NamespacedName) {}); err != nil {
		t.Fatal(err)
	}
	kc.ClearActions()
	rerr := f.r.Reconcile(ctx, names.WebhookConfiguration)
	got, err := kc.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, names.WebhookConfiguration, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got, f, rerr
}

func TestReconcile(t *testing.T) {
	ca := map[string][]byte{certresources.CACert: caCert}
	for name, cc := range map[string]admissionregistrationv1.WebhookClientConfig{
		"service": serviceConfig(),
		"url":     urlConfig(),
	} {
		t.Run(name, func(t *testing.T) {
			written := asWritten(cc)
			got, _, err := reconcileWith(t, written, ca)
			if err != nil {
				t.Fatalf("Reconcile: %v", err)
			}
			if len(got.Webhooks) != 3 {
				t.Fatalf("webhooks = %d", len(got.Webhooks))
			}
			for i, wh := range got.Webhooks {
				if !bytes.Equal(wh.ClientConfig.CABundle, caCert) {
					t.Errorf("%s: caBundle = %q", wh.Name, wh.ClientConfig.CABundle)
				}
				r := wh.Rules
				if len(r) != 1 || len(r[0].Operations) != 1 || r[0].Operations[0] != admissionregistrationv1.Create ||
					!equality.Semantic.DeepEqual(r[0].Resources, []string{"pods"}) ||
					!equality.Semantic.DeepEqual(r[0].APIGroups, []string{""}) || !equality.Semantic.DeepEqual(r[0].APIVersions, []string{"v1"}) {
					t.Errorf("%s: rules = %+v", wh.Name, r)
				}
				if *wh.FailurePolicy != admissionregistrationv1.Fail || *wh.SideEffects != admissionregistrationv1.SideEffectClassNone ||
					*wh.TimeoutSeconds != 3 || *wh.ReinvocationPolicy != admissionregistrationv1.NeverReinvocationPolicy {
					t.Errorf("%s: policy fields = %v %v %v %v", wh.Name, *wh.FailurePolicy, *wh.SideEffects, *wh.TimeoutSeconds, *wh.ReinvocationPolicy)
				}
				switch {
				case cc.Service != nil:
					if wh.ClientConfig.Service.Path == nil || *wh.ClientConfig.Service.Path != admission.Path || wh.ClientConfig.URL != nil {
						t.Errorf("%s: service = %+v", wh.Name, wh.ClientConfig.Service)
					}
				default:
					if *wh.ClientConfig.URL != *cc.URL || wh.ClientConfig.Service != nil {
						t.Errorf("%s: url = %v, want %v unchanged", wh.Name, *wh.ClientConfig.URL, *cc.URL)
					}
				}
				w := written.Webhooks[i]
				if wh.Name != w.Name || !equality.Semantic.DeepEqual(wh.NamespaceSelector, w.NamespaceSelector) ||
					!equality.Semantic.DeepEqual(wh.ObjectSelector, w.ObjectSelector) {
					t.Errorf("%s: selectors changed: %+v %+v", wh.Name, wh.NamespaceSelector, wh.ObjectSelector)
				}
			}
			if len(got.OwnerReferences) != 1 || got.OwnerReferences[0].Kind != "Namespace" || got.OwnerReferences[0].Name != system.Namespace() {
				t.Errorf("owner references = %+v", got.OwnerReferences)
			}
		})
	}
}

func TestReconcileKeepsUserSettings(t *testing.T) {
	written := asWritten(serviceConfig())
	for i := range written.Webhooks {
		written.Webhooks[i].TimeoutSeconds = ptr.To(int32(2))
		written.Webhooks[i].FailurePolicy = ptr.To(admissionregistrationv1.Ignore) // the reconciler's to set
	}
	got, _, err := reconcileWith(t, written, map[string][]byte{certresources.CACert: caCert})
	if err != nil {
		t.Fatal(err)
	}
	for _, wh := range got.Webhooks {
		if *wh.TimeoutSeconds != 2 || *wh.FailurePolicy != admissionregistrationv1.Fail {
			t.Errorf("%s: timeout %d, failurePolicy %s", wh.Name, *wh.TimeoutSeconds, *wh.FailurePolicy)
		}
	}
}

func TestReconcileCurrentIsNoUpdate(t *testing.T) {
	current := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: names.WebhookConfiguration},
		Webhooks:   admission.Webhooks(system.Namespace(), serviceConfig()),
	}
	for i := range current.Webhooks {
		current.Webhooks[i].ClientConfig.CABundle = caCert
	}
	_, f, err := reconcileWith(t, current, map[string][]byte{certresources.CACert: caCert})
	if err != nil {
		t.Fatal(err)
	}
	// The first pass adds the namespace owner; the second has nothing to do.
	got, _ := fakekube.Get(f.ctx).AdmissionregistrationV1().MutatingWebhookConfigurations().Get(f.ctx, names.WebhookConfiguration, metav1.GetOptions{})
	if err := fakemwh.Get(f.ctx).Informer().GetIndexer().Update(got); err != nil {
		t.Fatal(err)
	}
	kc := fakekube.Get(f.ctx)
	kc.ClearActions()
	if err := f.r.Reconcile(f.ctx, names.WebhookConfiguration); err != nil {
		t.Fatal(err)
	}
	for _, a := range kc.Actions() {
		if a.GetVerb() == "update" {
			t.Errorf("unexpected %s %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
}

func TestReconcileErrors(t *testing.T) {
	noClient := asWritten(serviceConfig())
	noClient.Webhooks[1].ClientConfig = admissionregistrationv1.WebhookClientConfig{}
	for name, tc := range map[string]struct {
		mwh    *admissionregistrationv1.MutatingWebhookConfiguration
		secret map[string][]byte
		want   string
	}{
		"secret not filled yet": {asWritten(serviceConfig()), map[string][]byte{}, "has no"},
		"no service or url":     {noClient, map[string][]byte{certresources.CACert: caCert}, "neither a service nor a URL"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, _, err := reconcileWith(t, tc.mwh, tc.secret); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Reconcile error = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestReconcileSkipsWhenNotLeader(t *testing.T) {
	f := newFixture(t, nil)
	if err := f.r.Reconcile(f.ctx, names.WebhookConfiguration); !controller.IsSkipKey(err) {
		t.Errorf("Reconcile as follower = %v, want a skip key", err)
	}
}

// The API server calls mutating configurations in name order; ours must come
// before Istio's injector so the injector sees the annotation.
func TestConfigurationSortsBeforeIstio(t *testing.T) {
	order := []string{"istio-sidecar-injector", "istio-revision-tag-default", "istio-sidecar-injector-1-24", names.WebhookConfiguration}
	sort.Strings(order)
	if order[0] != names.WebhookConfiguration {
		t.Errorf("order = %v, want %s first", order, names.WebhookConfiguration)
	}
}

func TestWebhooksSelectors(t *testing.T) {
	whs := admission.Webhooks("istio-aux", urlConfig())
	names := []string{whs[0].Name, whs[1].Name, whs[2].Name}
	if !equality.Semantic.DeepEqual(names, []string{admission.WebhookEnabled, admission.WebhookLegacy, admission.WebhookPods}) {
		t.Fatalf("names = %v", names)
	}
	ns := func(labels map[string]string, name string) map[string]string {
		l := map[string]string{corev1.LabelMetadataName: name}
		for k, v := range labels {
			l[k] = v
		}
		return l
	}
	tests := map[string]struct {
		nsLabels, podLabels map[string]string
		want                []string // the webhooks the API server would call
	}{
		"enabled namespace":     {ns(admissiontest.EnabledNS, "ml"), nil, []string{admission.WebhookEnabled}},
		"legacy namespace":      {ns(admissiontest.LegacyNS, "ml"), nil, []string{admission.WebhookLegacy}},
		"both labels":           {ns(map[string]string{keys.LabelEnabled: "true", keys.LegacyLabel: "enabled"}, "ml"), nil, []string{admission.WebhookEnabled}},
		"pod label, plain ns":   {ns(nil, "ml"), map[string]string{keys.LabelEnabled: "true"}, []string{admission.WebhookPods}},
		"pod label, enabled ns": {ns(admissiontest.EnabledNS, "ml"), map[string]string{keys.LabelEnabled: "true"}, []string{admission.WebhookEnabled}},
		// Called, and Admit decides: the pod's annotation may still opt it in.
		"pod opted out by label":    {ns(admissiontest.EnabledNS, "ml"), map[string]string{keys.LabelEnabled: "false"}, []string{admission.WebhookEnabled}},
		"plain namespace":           {ns(nil, "ml"), nil, nil},
		"system namespace":          {ns(admissiontest.EnabledNS, "istio-aux"), map[string]string{keys.LabelEnabled: "true"}, nil},
		"ns label false, pod label": {ns(map[string]string{keys.LabelEnabled: "false"}, "ml"), map[string]string{keys.LabelEnabled: "true"}, []string{admission.WebhookPods}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := admissiontest.Called(t, whs, tc.nsLabels, tc.podLabels)
			if !equality.Semantic.DeepEqual(got, tc.want) {
				t.Errorf("called %v, want %v", got, tc.want)
			}
		})
	}
}

// The mode follows the ConfigMap through knative's informed watcher: a
// missing ConfigMap is the default, a change applies without a restart, an
// invalid value keeps the previous mode.
func TestModeFollowsConfigMap(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	probe := newFixture(t, nil) // only for a fake client
	kc := fakekube.Get(probe.ctx)
	cmw := informer.NewInformedWatcher(kc, system.Namespace())
	f := newFixture(t, cmw)
	// Observers of one ConfigMap run in registration order, so once this one
	// has seen a value, the webhook's observer has handled it.
	seen := make(chan string, 10)
	cmw.Watch(names.ConfigMap, func(cm *corev1.ConfigMap) { seen <- cm.Data["mode"] })
	if err := cmw.Start(ctx.Done()); err != nil {
		t.Fatalf("Start with no ConfigMap: %v", err)
	}
	if got := f.r.mode(); got != admission.ModeHold {
		t.Fatalf("default mode = %s", got)
	}
	cms := kc.CoreV1().ConfigMaps(system.Namespace())
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: names.ConfigMap, Namespace: system.Namespace()}, Data: map[string]string{"mode": "native"}}
	if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForMode(t, f, admission.ModeNative)

	cm.Data["mode"] = "sidecar-less"
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitSeen(t, seen, "sidecar-less")
	if got := f.r.mode(); got != admission.ModeNative {
		t.Errorf("mode after an invalid value = %s, want native kept", got)
	}
	cm.Data["mode"] = "hold"
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForMode(t, f, admission.ModeHold)
}

func waitSeen(t *testing.T, seen <-chan string, want string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case v := <-seen:
			if v == want {
				return
			}
		case <-timeout:
			t.Fatalf("ConfigMap value %q never observed", want)
		}
	}
}

func waitForMode(t *testing.T, f *fixture, want admission.Mode) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for f.r.mode() != want {
		if time.Now().After(deadline) {
			t.Fatalf("mode = %s, want %s before the deadline", f.r.mode(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
