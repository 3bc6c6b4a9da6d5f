package explain_test

import (
	"context"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/istio-aux/istio-aux/kubectl/explain"
	"github.com/istio-aux/istio-aux/webhook/admission"
)

// TestWebhookCause: an opted-in pod without the hold, which the webhook
// would mutate now, under each state of the webhook. A webhook that was
// down or slow is blamed only where the failurePolicy is Ignore: under
// Fail, the API server refuses a pod whose call fails, so one let in
// without the hold was not sent to the webhook, or was while the policy
// was Ignore.
func TestWebhookCause(t *testing.T) {
	fail, ignore := admissionregistrationv1.Fail, admissionregistrationv1.Ignore
	tests := map[string]struct {
		policy     admissionregistrationv1.FailurePolicyType
		ready      bool
		started    time.Time // the webhook's oldest running pod
		configured time.Time // the configuration's creation; zero: unknown
		cause      string
		says       []string // parts of the hold's text
		check      string
	}{
		"Fail, the webhook up since before the pod": {policy: fail, ready: true, started: created.Add(-time.Hour),
			cause: explain.CauseWebhookNotCalled,
			says:  []string{"With failurePolicy Fail, as now, a call that fails refuses the pod", "or failurePolicy was Ignore at the time"},
			check: "--show-managed-fields"},
		"Fail, the webhook started after the pod: not blamed": {policy: fail, ready: true, started: created.Add(time.Minute),
			cause: explain.CauseWebhookNotCalled, says: []string{"With failurePolicy Fail", "did not call the webhook"}},
		"Fail, no ready endpoint now: not blamed": {policy: fail, started: created.Add(-time.Hour),
			cause: explain.CauseWebhookNotCalled, says: []string{"With failurePolicy Fail"}},
		"Ignore, the webhook started after the pod": {policy: ignore, ready: true, started: created.Add(time.Minute),
			cause: explain.CauseWebhookDown,
			says: []string{"the webhook's oldest running pod started at 2026-11-27T11:51:00Z, after the pod was created",
				"with failurePolicy Ignore (webhook enabled.istio-aux.dev) the API server admits pods unchanged"}},
		"Ignore, no ready endpoint": {policy: ignore, started: created.Add(-time.Hour),
			cause: explain.CauseWebhookDown,
			says:  []string{"has no ready endpoint: the webhook is down, and with failurePolicy Ignore (webhook enabled.istio-aux.dev)"},
			check: "get endpointslices"},
		"Ignore, the webhook up since before the pod": {policy: ignore, ready: true, started: created.Add(-time.Hour),
			cause: explain.CauseWebhookNotCalled,
			says:  []string{"did not answer within its timeout, and failurePolicy Ignore (webhook enabled.istio-aux.dev) let the pod in unchanged"},
			check: "logs -l app.kubernetes.io/component=webhook"},
		"the configuration created after the pod": {policy: fail, ready: true, started: created.Add(time.Minute), configured: created.Add(time.Minute),
			cause: explain.CauseWebhookMissing,
			says: []string{"MutatingWebhookConfiguration istio-aux-webhook was created at 2026-11-27T11:51:00Z, after the pod (2026-11-27T11:50:00Z)",
				"re-create this one"}},
		"the configuration created before the pod": {policy: fail, ready: true, started: created.Add(-time.Hour), configured: created.Add(-time.Hour),
			cause: explain.CauseWebhookNotCalled, says: []string{"With failurePolicy Fail"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			whs := admission.Webhooks(sys, admissionregistrationv1.WebhookClientConfig{})
			for i := range whs {
				whs[i].FailurePolicy = ptr.To(tc.policy)
			}
			mwc := &admissionregistrationv1.MutatingWebhookConfiguration{
				ObjectMeta: metav1.ObjectMeta{Name: "istio-aux-webhook", CreationTimestamp: metav1.NewTime(tc.configured)}, Webhooks: whs}
			slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: sys, Name: "istio-aux-webhook-abcde",
				Labels: map[string]string{discoveryv1.LabelServiceName: "istio-aux-webhook"}},
				Endpoints: []discoveryv1.Endpoint{{Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(tc.ready)}}}}
			objects := []runtime.Object{mwc, slice, webhookPod(tc.started), namespace("jobs", optedIn, created.Add(-time.Hour)),
				jobPod("jobs", "nohold", corev1.RestartPolicyNever, running(), noHold(""))}
			src := explain.Source{Client: fake.NewClientset(objects...), SystemNamespace: sys, Now: func() time.Time { return now }}
			r, err := src.Report(context.Background(), explain.Selection{Namespace: "jobs", Names: []string{"nohold"}})
			if err != nil {
				t.Fatal(err)
			}
			got := r.Pods[0]
			if got.Hold.Present || got.Hold.Cause != tc.cause {
				t.Errorf("hold %+v, want missing with cause %s", got.Hold, tc.cause)
			}
			for _, s := range tc.says {
				if !strings.Contains(got.Hold.Text, s) {
					t.Errorf("hold %q, want it to say %q", got.Hold.Text, s)
				}
			}
			if len(got.Problems) != 1 || !strings.Contains(got.Problems[0], "admitted without the hold") {
				t.Errorf("problems %q, want the hold missing", got.Problems)
			}
			if tc.check != "" && !containsText(got.Checks, tc.check) {
				t.Errorf("checks %q, want one with %q", got.Checks, tc.check)
			}
		})
	}
}
