package config

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/istio-aux/istio-aux/internal/settings"
	"github.com/istio-aux/istio-aux/pkg/keys"
)

// Names the function's policies (204, 205) are written against.
const (
	execPolicy        = "istio-aux-proxyquit-exec"
	execCommandPolicy = "istio-aux-proxyquit-exec-command"
	deletePolicy      = "istio-aux-proxyquit-delete"
	proxyquitUser     = "system:serviceaccount:istio-aux:istio-aux-proxyquit"
)

// systemNamespaces are never exec'd into, whatever their labels.
var systemNamespaces = []string{"kube-system", "kube-public", "kube-node-lease", "istio-system", "istio-aux"}

// execPolicies decodes config/'s ValidatingAdmissionPolicies and bindings,
// with the file each one comes from.
func execPolicies(t *testing.T) (map[string]*admissionregistrationv1.ValidatingAdmissionPolicy, []*admissionregistrationv1.ValidatingAdmissionPolicyBinding, map[string]string) {
	t.Helper()
	policies := map[string]*admissionregistrationv1.ValidatingAdmissionPolicy{}
	var bindings []*admissionregistrationv1.ValidatingAdmissionPolicyBinding
	files := map[string]string{}
	for _, d := range loadDocs(t, "config", nil) {
		switch d.obj.GetKind() {
		case "ValidatingAdmissionPolicy":
			policies[d.obj.GetName()] = decode[admissionregistrationv1.ValidatingAdmissionPolicy](t, d)
		case "ValidatingAdmissionPolicyBinding":
			bindings = append(bindings, decode[admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, d))
		}
		files[d.obj.GetKind()+"/"+d.obj.GetName()] = d.file
	}
	if policies[execPolicy] == nil || policies[execCommandPolicy] == nil || policies[deletePolicy] == nil {
		t.Fatalf("config/ lacks the policies %s, %s and %s", execPolicy, execCommandPolicy, deletePolicy)
	}
	return policies, bindings, files
}

// TestExecPoliciesMatchOnlyTheFunction: the exec policies look at
// pods/exec CONNECTs, the delete policy at pod DELETEs, of the function's
// ServiceAccount only (the one the Knative Service runs as), and each
// fails closed.
func TestExecPoliciesMatchOnlyTheFunction(t *testing.T) {
	policies, _, _ := execPolicies(t)
	ksvc := find(t, loadDocs(t, "config", nil), "Service", "proxy-quit")
	sa, _, _ := unstructured.NestedString(ksvc.obj.Object, "spec", "template", "spec", "serviceAccountName")
	if want := "system:serviceaccount:" + ksvc.obj.GetNamespace() + ":" + sa; want != proxyquitUser {
		t.Fatalf("the function runs as %s, the policies are written for %s", want, proxyquitUser)
	}
	for name, p := range policies {
		if p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy != admissionregistrationv1.Fail {
			t.Errorf("%s: failurePolicy must be Fail: it is a security boundary", name)
		}
		op, resource := admissionregistrationv1.Connect, "pods/exec"
		if name == deletePolicy {
			op, resource = admissionregistrationv1.Delete, "pods"
		}
		rules := p.Spec.MatchConstraints.ResourceRules
		if len(rules) != 1 || len(rules[0].Operations) != 1 || rules[0].Operations[0] != op ||
			len(rules[0].Resources) != 1 || rules[0].Resources[0] != resource {
			t.Errorf("%s: matchConstraints %+v, want %s on %s only", name, rules, op, resource)
		}
		// Exactly this condition: with failurePolicy Fail, a condition that
		// could error would deny every exec of every user.
		if mc := p.Spec.MatchConditions; len(mc) != 1 || mc[0].Expression != "request.userInfo.username == '"+proxyquitUser+"'" {
			t.Errorf("%s: matchConditions %+v, want the function's username only", name, mc)
		}
	}
}

// TestExecPoliciesUseOurNames ties the CEL literals to the Go constants the
// function and the opt-in decision use, so that a rename breaks here and not
// in a cluster.
func TestExecPoliciesUseOurNames(t *testing.T) {
	policies, _, _ := execPolicies(t)
	all := func(p *admissionregistrationv1.ValidatingAdmissionPolicy) string {
		var b strings.Builder
		for _, v := range p.Spec.Variables {
			b.WriteString(v.Expression + "\n")
		}
		for _, v := range p.Spec.Validations {
			b.WriteString(v.Expression + "\n")
		}
		return b.String()
	}
	for _, tc := range []struct{ policy, literal, why string }{
		{execPolicy, "object.?container.orValue('') == '" + keys.ProxyContainer + "'", "the function execs in keys.ProxyContainer"},
		{execPolicy, "[?'" + keys.LabelEnabled + "'].orValue('') in ['true', 'pods']", "decision.NamespaceOptedIn reads keys.LabelEnabled == true"},
		{execPolicy, "[?'" + keys.LegacyLabel + "'].orValue('') == '" + keys.LegacyLabelValue + "'", "decision.NamespaceOptedIn reads the legacy label"},
		{execPolicy, "!(request.namespace in ['" + strings.Join(systemNamespaces, "', '") + "'])", "system namespaces, ours (100-namespace.yaml) included, are never a target"},
		{execCommandPolicy, "params.?data[?'quit-command'].orValue('" + settings.DefaultQuitCommand + "')", "the function's default when quit-command is unset"},
		{deletePolicy, "s.name == '" + keys.ValidationContainer + "'", "decision.CNIRaced reads keys.ValidationContainer"},
		{deletePolicy, fmt.Sprintf("exitCode.orValue(0) == %d", keys.ValidationFailedCode), "decision.CNIRaced reads keys.ValidationFailedCode"},
		{deletePolicy, "[?'" + keys.LabelEnabled + "'].orValue('') in ['true', 'pods']", "the exec policy's opt-in"},
		{deletePolicy, "[?'" + keys.LegacyLabel + "'].orValue('') == '" + keys.LegacyLabelValue + "'", "the exec policy's opt-in"},
		{deletePolicy, "!(request.namespace in ['" + strings.Join(systemNamespaces, "', '") + "'])", "system namespaces are never a target"},
	} {
		if !strings.Contains(all(policies[tc.policy]), tc.literal) {
			t.Errorf("%s does not contain %q (%s)", tc.policy, tc.literal, tc.why)
		}
	}
}

// TestExecPolicyBindings: every binding names a policy defined in an earlier
// file; the argv policy reads config-istio-aux and denies when it is
// missing; and its bindings cover every namespace where the other policy
// lets the function exec (both opt-in labels, both values).
func TestExecPolicyBindings(t *testing.T) {
	policies, bindings, files := execPolicies(t)
	bound := map[string]bool{}
	var scopes []string
	for _, b := range bindings {
		p := policies[b.Spec.PolicyName]
		if p == nil {
			t.Errorf("binding %s: no policy %q in config/", b.Name, b.Spec.PolicyName)
			continue
		}
		bound[p.Name] = true
		if pf, bf := files["ValidatingAdmissionPolicy/"+p.Name], files["ValidatingAdmissionPolicyBinding/"+b.Name]; pf >= bf {
			t.Errorf("binding %s (%s) is not applied after its policy (%s)", b.Name, bf, pf)
		}
		if len(b.Spec.ValidationActions) != 1 || b.Spec.ValidationActions[0] != admissionregistrationv1.Deny {
			t.Errorf("binding %s: validationActions %v, want [Deny]", b.Name, b.Spec.ValidationActions)
		}
		if p.Spec.ParamKind == nil {
			if b.Spec.MatchResources != nil {
				t.Errorf("binding %s: %s must hold everywhere, not in %+v", b.Name, p.Name, b.Spec.MatchResources)
			}
			continue
		}
		ref := b.Spec.ParamRef
		if ref == nil || ref.Name != "config-istio-aux" || ref.Namespace != "istio-aux" ||
			ref.ParameterNotFoundAction == nil || *ref.ParameterNotFoundAction != admissionregistrationv1.DenyAction {
			t.Errorf("binding %s: paramRef %+v, want istio-aux/config-istio-aux with parameterNotFoundAction Deny", b.Name, ref)
		}
		find(t, loadDocs(t, "config", nil), "ConfigMap", "config-istio-aux")
		if b.Spec.MatchResources == nil || b.Spec.MatchResources.NamespaceSelector == nil {
			t.Errorf("binding %s: unscoped; a missing ConfigMap would deny every exec in the cluster", b.Name)
			continue
		}
		sel := b.Spec.MatchResources.NamespaceSelector
		for k, v := range sel.MatchLabels {
			scopes = append(scopes, k+"="+v)
		}
		excludesSystem := false
		for _, e := range sel.MatchExpressions {
			if e.Key == "kubernetes.io/metadata.name" && e.Operator == "NotIn" {
				excludesSystem = strings.Join(e.Values, ",") == strings.Join(systemNamespaces, ",")
				continue
			}
			for _, v := range e.Values {
				scopes = append(scopes, e.Key+"="+v)
			}
		}
		if !excludesSystem {
			t.Errorf("binding %s: must leave out the system namespaces %v (a missing ConfigMap must never block exec there)", b.Name, systemNamespaces)
		}
	}
	for name := range policies {
		if !bound[name] {
			t.Errorf("policy %s has no binding: it does nothing", name)
		}
	}
	sort.Strings(scopes)
	want := []string{keys.LegacyLabel + "=" + keys.LegacyLabelValue, keys.LabelEnabled + "=pods", keys.LabelEnabled + "=true"}
	sort.Strings(want)
	if strings.Join(scopes, ",") != strings.Join(want, ",") {
		t.Errorf("the argv policy is bound in namespaces %v, want exactly the opted-in ones %v", scopes, want)
	}
}

// TestQuitCommandSplitLikeTheFunction: the policy splits quit-command with a
// regular expression (the API server's CEL findAll uses Go's regexp); the
// function with strings.Fields. They must agree on every rune, or the policy
// would deny the function's own quit.
func TestQuitCommandSplitLikeTheFunction(t *testing.T) {
	policies, _, _ := execPolicies(t)
	var expr string
	for _, v := range policies[execCommandPolicy].Spec.Variables {
		if v.Name == "argv" {
			expr = v.Expression
		}
	}
	m := regexp.MustCompile(`\.findAll\(r'([^']+)'\)`).FindStringSubmatch(expr)
	if m == nil {
		t.Fatalf("no findAll(r'...') in the argv variable %q", expr)
	}
	word := regexp.MustCompile(m[1])
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if !utf8.ValidRune(r) {
			continue
		}
		if inWord := word.MatchString(string(r)); inWord == unicode.IsSpace(r) {
			t.Errorf("rune %U: in a word by the policy = %v, white space to strings.Fields = %v", r, inWord, unicode.IsSpace(r))
		}
	}
	for _, s := range []string{
		settings.DefaultQuitCommand,
		"  pilot-agent\trequest \u00a0POST\n/quitquitquit ",
		"curl -sf -XPOST http://127.0.0.1:15020/quitquitquit",
		"", " \t ",
	} {
		got, want := word.FindAllString(s, -1), strings.Fields(s)
		if strings.Join(got, "\x00") != strings.Join(want, "\x00") || len(got) != len(want) {
			t.Errorf("%q: policy argv %q, function argv %q", s, got, want)
		}
	}
}

// TestNothingOfOursCanChangeWhatIsExeced: quit-command (config-istio-aux)
// and the exec policies decide what runs in every opted-in proxy; no
// istio-aux role may write ConfigMaps or admission policies, or grant
// itself more.
func TestNothingOfOursCanChangeWhatIsExeced(t *testing.T) {
	guarded := map[string]bool{"configmaps": true, "validatingadmissionpolicies": true, "validatingadmissionpolicybindings": true,
		"roles": true, "clusterroles": true, "rolebindings": true, "clusterrolebindings": true, "serviceaccounts": true}
	for _, d := range allDocs(t) {
		if k := d.obj.GetKind(); k != "Role" && k != "ClusterRole" {
			continue
		}
		rules, _, _ := unstructured.NestedSlice(d.obj.Object, "rules")
		for _, r := range rules {
			res, _, _ := unstructured.NestedStringSlice(r.(map[string]any), "resources")
			verbs, _, _ := unstructured.NestedStringSlice(r.(map[string]any), "verbs")
			for _, rs := range res {
				for _, v := range verbs {
					if guarded[rs] && v != "get" && v != "list" && v != "watch" {
						t.Errorf("%s: %s on %s: would let an istio-aux component choose what runs in every proxy", d, v, rs)
					}
					if v == "escalate" || v == "bind" || v == "impersonate" {
						t.Errorf("%s: %s on %s", d, v, rs)
					}
				}
			}
		}
	}
}
