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
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/istio-aux/istio-aux/kubectl/explain"
)

// TestExplainFailures: for each way the function's quit fails, the Event it
// records (its own words) becomes a problem that says what to check.
func TestExplainFailures(t *testing.T) {
	forbidden := func(msg string) error {
		return apierrors.NewForbidden(schema.GroupResource{Resource: "pods/exec"}, "done", errors.New(msg))
	}
	tests := map[string]struct {
		err          error
		problem      string
		check, final string // check "": none
	}{
		"the namespace is not opted in for the exec policy": {
			err: forbidden("ValidatingAdmissionPolicy 'istio-aux-proxyquit-exec' with binding 'istio-aux-proxyquit-exec' denied request: " +
				"istio-aux-proxyquit may not exec in namespace jobs: not opted in (label it istio-aux.dev/enabled=true, or =pods to let its pods opt in one by one)"),
			problem: "the exec policy istio-aux-proxyquit-exec refuses namespace jobs", check: "kubectl label namespace jobs istio-aux.dev/enabled=pods",
			final: "failed for good"},
		"a system namespace": {
			err: forbidden("ValidatingAdmissionPolicy 'istio-aux-proxyquit-exec' with binding 'istio-aux-proxyquit-exec' denied request: " +
				"istio-aux-proxyquit may not exec in the system namespace jobs"),
			problem: "never lets istio-aux quit a proxy in a system namespace (jobs is one)", check: "", final: "failed for good"},
		"the policy's param is missing": {
			err:     forbidden("failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"),
			problem: "ConfigMap istio-aux/config-istio-aux, is missing", check: "kubectl -n istio-aux get configmap config-istio-aux -o yaml",
			final: "failed for good"},
		"RBAC": {
			err:     forbidden(`User "system:serviceaccount:istio-aux:istio-aux-proxyquit" cannot create resource "pods/exec"`),
			problem: "the API server denied the exec (RBAC", check: "kubectl auth can-i create pods/exec -n jobs --as=system:serviceaccount:istio-aux:istio-aux-proxyquit",
			final: "failed for good"},
		"the quit command exits non-zero": {
			err:     fmt.Errorf("exec: %w", utilexec.CodeExitError{Err: errors.New("command terminated with exit code 255"), Code: 255}),
			problem: "exited non-zero", check: "kubectl logs -n jobs failed -c istio-proxy", final: "failed for good"},
		"no pilot-agent in the proxy": {
			err:     errors.New(`exec: OCI runtime exec failed: exec: "pilot-agent": executable file not found in $PATH`),
			problem: "not in the istio-proxy image", check: "get configmap config-istio-aux", final: "failed for good"},
		"the API server is throttling": {
			err:     apierrors.NewTooManyRequests("slow down", 1),
			problem: "may pass", check: "kubectl istio-aux check", final: "retries the quit"},
	}
	jobs := namespace("jobs", optedIn, created.Add(-time.Hour))
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := jobPod("jobs", "failed", corev1.RestartPolicyNever, exited(0, 30*time.Second))
			objects := append(install(nil), jobs, p, event(p, "ProxyQuit", "Quit istio-proxy: all apps terminated", time.Hour),
				event(p, "ProxyQuitFailed", recorded(t, tc.err), 10*time.Second))
			src := explain.Source{Client: fake.NewClientset(objects...), SystemNamespace: sys, Now: func() time.Time { return now }}
			r, err := src.Report(context.Background(), explain.Selection{Namespace: "jobs", Names: []string{"failed"}})
			if err != nil {
				t.Fatal(err)
			}
			got := r.Pods[0]
			if got.Verdict != explain.VerdictProblem || len(got.Problems) != 1 || !strings.Contains(got.Problems[0], tc.problem) ||
				(tc.check == "") != (len(got.Checks) == 0) || tc.check != "" && !containsText(got.Checks, tc.check) || !strings.Contains(got.Next, tc.final) {
				t.Errorf("verdict %s, problems %q, checks %q, next %q; want a problem saying %q, a check %q, next %q",
					got.Verdict, got.Problems, got.Checks, got.Next, tc.problem, tc.check, tc.final)
			}
		})
	}
}

// TestExplainFailureResolved: a failure followed by the proxy's stop is
// history, not a problem.
func TestExplainFailureResolved(t *testing.T) {
	p := jobPod("jobs", "later", corev1.RestartPolicyNever, exited(0, time.Minute), finished)
	objects := append(install(nil), namespace("jobs", optedIn, time.Time{}), p,
		event(p, "ProxyQuitFailed", recorded(t, apierrors.NewTooManyRequests("slow down", 1)), 40*time.Second))
	src := explain.Source{Client: fake.NewClientset(objects...), SystemNamespace: sys, Now: func() time.Time { return now }}
	r, err := src.Report(context.Background(), explain.Selection{Namespace: "jobs", Names: []string{"later"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Pods[0]; got.Verdict != explain.VerdictOK || len(got.Problems) != 0 || len(got.Events) != 1 {
		t.Errorf("verdict %s, problems %q, %d events; want ok, no problem, the failure listed", got.Verdict, got.Problems, len(got.Events))
	}
}
