package check

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/pkg/names"
)

// execPolicy checks the ValidatingAdmissionPolicies that confine the
// function's exec (config/204) and their bindings (205), whose param must
// resolve to config-istio-aux.
func (r *run) execPolicy() Item {
	show := "kubectl get validatingadmissionpolicy,validatingadmissionpolicybinding -l app.kubernetes.io/name=istio-aux -o yaml"
	api := r.Client.AdmissionregistrationV1()
	var problems []string
	for _, name := range []string{names.ExecPolicy, names.ExecCommandPolicy} {
		p, err := api.ValidatingAdmissionPolicies().Get(r.ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			problems = append(problems, "policy "+name+" is missing")
		case err != nil:
			problems = append(problems, err.Error())
		case name == names.ExecCommandPolicy && (p.Spec.ParamKind == nil || p.Spec.ParamKind.Kind != "ConfigMap" || p.Spec.ParamKind.APIVersion != "v1"):
			problems = append(problems, "policy "+name+" does not take a ConfigMap as its param")
		}
	}
	bindings := map[string]string{names.ExecBinding: names.ExecPolicy, names.ExecCommandBinding: names.ExecCommandPolicy,
		names.ExecCommandLegacyBinding: names.ExecCommandPolicy}
	for _, name := range slices.Sorted(maps.Keys(bindings)) {
		b, err := api.ValidatingAdmissionPolicyBindings().Get(r.ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			problems = append(problems, "binding "+name+" is missing")
		case err != nil:
			problems = append(problems, err.Error())
		default:
			problems = append(problems, r.bindingProblems(b, bindings[name])...)
		}
	}
	if len(problems) > 0 {
		return fail(ItemExecPolicy, strings.Join(problems, "; ")+": without them the function may exec anything, anywhere RBAC lets it (pods/exec cluster-wide)", show)
	}
	return ok(ItemExecPolicy, fmt.Sprintf("policies %s and %s bound (%d bindings), param ConfigMap %s/%s present",
		names.ExecPolicy, names.ExecCommandPolicy, len(bindings), r.SystemNamespace, names.ConfigMap))
}

// bindingProblems checks one binding: its policy, that it denies, and that
// the param of a command binding is config-istio-aux, which exists.
func (r *run) bindingProblems(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding, policy string) []string {
	var out []string
	if b.Spec.PolicyName != policy {
		out = append(out, fmt.Sprintf("binding %s binds %q, not %s", b.Name, b.Spec.PolicyName, policy))
	}
	if !slices.Contains(b.Spec.ValidationActions, admissionregistrationv1.Deny) {
		out = append(out, fmt.Sprintf("binding %s does not deny (validationActions %v)", b.Name, b.Spec.ValidationActions))
	}
	if policy != names.ExecCommandPolicy {
		return out
	}
	ref := b.Spec.ParamRef
	switch {
	case ref == nil || ref.Name != names.ConfigMap || ref.Namespace != r.SystemNamespace:
		out = append(out, fmt.Sprintf("binding %s's paramRef is not ConfigMap %s/%s", b.Name, r.SystemNamespace, names.ConfigMap))
	case !r.config.Found:
		out = append(out, fmt.Sprintf("binding %s's param, ConfigMap %s/%s, is missing: every quit in opted-in namespaces is denied", b.Name, r.SystemNamespace, names.ConfigMap))
	}
	return out
}
