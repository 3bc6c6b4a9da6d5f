package config

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	psaapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"

	"github.com/istio-aux/istio-aux/pkg/versions"
)

// podSecurityLabels are the Pod Security Admission labels istio-aux's
// namespace must carry (issue 43). Enforce is pinned to the oldest
// Kubernetes istio-aux runs on: a cluster upgrade whose newer policy
// tightens `restricted` cannot then refuse a replacement pod of the
// webhook, the bridge or NATS, with their availability at stake (it has
// happened: 1.34's policy refuses a host in a probe or a lifecycle hook,
// which 1.33's allowed). Warn and audit follow the cluster's newest
// policy, so that such a change shows on `kubectl apply` and in the audit
// log before anything is refused.
var podSecurityLabels = map[string]string{
	psaapi.EnforceLevelLabel:   string(psaapi.LevelRestricted),
	psaapi.EnforceVersionLabel: fmt.Sprintf("v1.%d", versions.OldestMinor),
	psaapi.WarnLevelLabel:      string(psaapi.LevelRestricted),
	psaapi.WarnVersionLabel:    psaapi.VersionLatest,
	psaapi.AuditLevelLabel:     string(psaapi.LevelRestricted),
	psaapi.AuditVersionLabel:   psaapi.VersionLatest,
}

// TestSystemNamespaceIsRestricted: config/100-namespace.yaml (config/
// standalone links to it) carries podSecurityLabels, and no other Pod
// Security label.
func TestSystemNamespaceIsRestricted(t *testing.T) {
	labels := find(t, allDocs(t), "Namespace", "istio-aux").obj.GetLabels()
	for k, want := range podSecurityLabels {
		if labels[k] != want {
			t.Errorf("namespace istio-aux: label %s = %q, want %q", k, labels[k], want)
		}
	}
	for k := range labels {
		if strings.HasPrefix(k, "pod-security.kubernetes.io/") && podSecurityLabels[k] == "" {
			t.Errorf("namespace istio-aux: label %s is not one the tests judge", k)
		}
	}
}

// TestPodsMeetTheNamespaceLevel: every pod the manifests of every config/
// folder make in istio-aux's namespace passes Pod Security Admission's own
// checks (k8s.io/pod-security-admission/policy, the version of the k8s.io
// libraries istio-aux builds with) at the level and version of each mode
// the namespace sets. That is the Deployments' and the StatefulSet's pod
// templates as written, the Knative Service's revision with the
// queue-proxy Knative adds, and the ApiServerSources' adapters as Knative
// Eventing makes them (knative_test.go). "latest" is the newest policy
// that module knows, which may be older than the cluster's.
func TestPodsMeetTheNamespaceLevel(t *testing.T) {
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	modes := namespaceLevels(t)
	pods := 0
	for _, dir := range append(slices.Clone(dirs), "config/nats-single") {
		for _, d := range loadDocs(t, dir, nil) {
			for _, p := range podsOf(t, d) {
				pods++
				for _, m := range modes {
					if r := policy.AggregateCheckResults(eval.EvaluatePod(m.lv, &p.pod.ObjectMeta, &p.pod.Spec)); !r.Allowed {
						t.Errorf("%s: violates %s (the namespace's %s): %s", p.name, m.lv.String(), strings.Join(m.modes, ", "), r.ForbiddenDetail())
					}
				}
			}
		}
	}
	// The webhook and the all-in-one's (config/standalone links the
	// webhook's), the bridge, the function, NATS twice, the dispatchers
	// and the three ApiServerSources' adapters.
	if pods < 11 {
		t.Errorf("evaluated %d pods, want every workload of every folder", pods)
	}
}

// level is a level and version the namespace sets, and the modes
// (enforce, warn, audit) it sets it for.
type level struct {
	lv    psaapi.LevelVersion
	modes []string
}

// namespaceLevels parses the level and version of each mode set on the
// namespace, as the PodSecurity admission plugin reads them, once per
// distinct level and version.
func namespaceLevels(t *testing.T) []level {
	t.Helper()
	labels := find(t, allDocs(t), "Namespace", "istio-aux").obj.GetLabels()
	var out []level
	for _, m := range []struct{ mode, level, version string }{
		{"enforce", psaapi.EnforceLevelLabel, psaapi.EnforceVersionLabel},
		{"warn", psaapi.WarnLevelLabel, psaapi.WarnVersionLabel},
		{"audit", psaapi.AuditLevelLabel, psaapi.AuditVersionLabel},
	} {
		l, ok := labels[m.level]
		if !ok {
			continue
		}
		lvl, err := psaapi.ParseLevel(l)
		if err != nil {
			t.Fatalf("namespace istio-aux: %s=%q: %v", m.level, l, err)
		}
		v, ok := labels[m.version]
		if !ok {
			v = psaapi.VersionLatest // the plugin's default
		}
		ver, err := psaapi.ParseVersion(v)
		if err != nil {
			t.Fatalf("namespace istio-aux: %s=%q: %v", m.version, v, err)
		}
		lv := psaapi.LevelVersion{Level: lvl, Version: ver}
		if i := slices.IndexFunc(out, func(l level) bool { return l.lv.String() == lv.String() }); i >= 0 {
			out[i].modes = append(out[i].modes, m.mode)
		} else {
			out = append(out, level{lv, []string{m.mode}})
		}
	}
	if len(out) == 0 {
		t.Fatal("namespace istio-aux sets no Pod Security level")
	}
	return out
}

// namedPod is a pod a document makes, named for the test's messages.
type namedPod struct {
	name string
	pod  corev1.PodTemplateSpec
}

// podsOf returns the pods document d makes in the namespace: a workload's
// pod template, a Knative Service's revision and an ApiServerSource's
// adapter as Knative makes them; none for a document that makes no pod.
func podsOf(t *testing.T, d doc) []namedPod {
	t.Helper()
	var path []string
	switch d.obj.GroupVersionKind().GroupKind().String() {
	case "Deployment.apps", "StatefulSet.apps", "DaemonSet.apps", "ReplicaSet.apps", "Job.batch":
		path = []string{"spec", "template"}
	case "CronJob.batch":
		path = []string{"spec", "jobTemplate", "spec", "template"}
	case "Service.serving.knative.dev":
		return []namedPod{{d.String() + " (its revision)", revisionPod(t, d)}}
	case "ApiServerSource.sources.knative.dev":
		return []namedPod{{d.String() + " (its adapter)", apiServerSourcePod(t, d)}}
	default:
		if _, found, _ := unstructured.NestedFieldNoCopy(d.obj.Object, "spec", "template"); found {
			t.Errorf("%s: a pod template of a kind this test cannot read: teach podsOf", d)
		}
		return nil
	}
	var pod corev1.PodTemplateSpec
	toTyped(t, d, &pod, path...)
	return []namedPod{{d.String(), pod}}
}

// toTyped converts the field of d at path into out; fields out's type does
// not have (a revision's containerConcurrency) are dropped.
func toTyped(t *testing.T, d doc, out any, path ...string) {
	t.Helper()
	m, found, err := unstructured.NestedMap(d.obj.Object, path...)
	if err != nil || !found {
		t.Fatalf("%s: no %s (%v)", d, strings.Join(path, "."), err)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, out); err != nil {
		t.Fatalf("%s: %s: %v", d, strings.Join(path, "."), err)
	}
}
