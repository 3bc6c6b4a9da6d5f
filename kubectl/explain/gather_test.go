package explain_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/istio-aux/istio-aux/kubectl/explain"
)

// TestSelections: named pods in the order named, a label selector, every
// pod of the namespace, and what matches nothing.
func TestSelections(t *testing.T) {
	objects := append(install(nil), namespace("jobs", optedIn, time.Time{}),
		jobPod("jobs", "b", corev1.RestartPolicyNever, running(), labelled(map[string]string{"job": "x"})),
		jobPod("jobs", "a", corev1.RestartPolicyNever, running(), labelled(map[string]string{"job": "x"})),
		jobPod("jobs", "c", corev1.RestartPolicyNever, running()))
	tests := map[string]struct {
		sel   explain.Selection
		names []string
		err   func(error) bool
	}{
		"named":           {sel: explain.Selection{Namespace: "jobs", Names: []string{"c", "a"}}, names: []string{"c", "a"}},
		"selector":        {sel: explain.Selection{Namespace: "jobs", Selector: "job=x"}, names: []string{"a", "b"}},
		"all":             {sel: explain.Selection{Namespace: "jobs", All: true}, names: []string{"a", "b", "c"}},
		"a missing pod":   {sel: explain.Selection{Namespace: "jobs", Names: []string{"a", "z"}}, err: apierrors.IsNotFound},
		"nothing matches": {sel: explain.Selection{Namespace: "jobs", Selector: "job=y"}, err: func(err error) bool { return errors.Is(err, explain.ErrNoPods) }},
		"an empty namespace": {sel: explain.Selection{Namespace: "empty", All: true},
			err: func(err error) bool { return errors.Is(err, explain.ErrNoPods) }},
	}
	for name, tc := range tests {
		src := explain.Source{Client: fake.NewClientset(objects...), SystemNamespace: sys, Now: func() time.Time { return now }}
		r, err := src.Report(context.Background(), tc.sel)
		if tc.err != nil {
			if err == nil || !tc.err(err) {
				t.Errorf("%s: err %v, want the kind the test names", name, err)
			}
			continue
		}
		var got []string
		for _, p := range r.Pods {
			got = append(got, p.Name)
		}
		if err != nil || fmt.Sprint(got) != fmt.Sprint(tc.names) {
			t.Errorf("%s: pods %v, err %v; want %v", name, got, err, tc.names)
		}
	}
}

// TestNotes: what the user may not read of istio-aux's namespace becomes a
// note, the pod is still explained on the defaults, and a webhook whose
// state is unknown is not blamed.
func TestNotes(t *testing.T) {
	objects := []runtime.Object{namespace("jobs", optedIn, time.Time{}),
		jobPod("jobs", "p", corev1.RestartPolicyNever, running(), noHold(""))}
	cs := fake.NewClientset(objects...)
	cs.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetNamespace() == sys || a.GetResource().Resource == "mutatingwebhookconfigurations" {
			return true, nil, apierrors.NewForbidden(a.GetResource().GroupResource(), "", errors.New("RBAC"))
		}
		return false, nil, nil
	})
	src := explain.Source{Client: cs, SystemNamespace: sys, Now: func() time.Time { return now }}
	r, err := src.Report(context.Background(), explain.Selection{Namespace: "jobs", Names: []string{"p"}})
	if err != nil {
		t.Fatal(err)
	}
	notes := strings.Join(r.Notes, "\n")
	for _, want := range []string{"reading ConfigMap istio-aux/config-istio-aux", "assuming no extra sidecars", "reading MutatingWebhookConfiguration istio-aux-webhook"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes %q, want %q", r.Notes, want)
		}
	}
	if got := r.Pods[0].Hold.Cause; got != explain.CauseWebhookNotCalled {
		t.Errorf("cause %q, want %q when the webhook's state is unknown", got, explain.CauseWebhookNotCalled)
	}
}
