package config

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	psaapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"k8s.io/utils/ptr"
)

// The pods Knative makes in istio-aux's namespace from config/'s Knative
// Service and config/eventing's ApiServerSources, as far as Pod Security
// Admission looks at them, and the sidecar Istio adds to some of them.
// Facts read in Knative's and Istio's sources, each named where it is used.

// restrictedContext is the container securityContext that meets
// `restricted` on its own, as every container istio-aux writes carries it
// (readOnlyRootFilesystem, which restricted does not ask for, aside).
func restrictedContext() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		RunAsNonRoot:             ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// revisionPod is the pod Knative Serving runs for the revision of the
// Knative Service d, per knative.dev/serving v0.50.0 (Knative 1.23, the
// release of knative.dev/pkg's pin; hack/tools/knative builds it):
//   - the template's containers as written. With config-features'
//     secure-pod-defaults at its default, Disabled, Knative fills in no
//     securityContext field (pkg/apis/serving/v1/revision_defaults.go,
//     defaultSecurityContext); Enabled or AllowRootBounded only fill in
//     fields left unset, and istio-aux's container sets them all, so the
//     flag changes nothing here;
//   - no pod-level securityContext: Knative's validation refuses one while
//     kubernetes.podspec-securitycontext is Disabled, its default
//     (pkg/apis/serving/fieldmask.go, PodSecurityContextMask), so each
//     container carries its own;
//   - the queue-proxy container, whose securityContext is fixed whatever
//     the flags: allowPrivilegeEscalation false, readOnlyRootFilesystem
//     true, runAsNonRoot true, capabilities drop ALL, seccompProfile
//     RuntimeDefault (pkg/reconciler/revision/resources/queue.go,
//     queueSecurityContext). queue-proxy meets restricted by default;
//   - a preStop hook on the user container, an httpGet of queue-proxy's
//     admin port 8022 without a host (deploy.go, userLifecycle);
//   - the volumes it may add, each of a type restricted allows: an emptyDir
//     (knative-var-log), a projected token (knative-token-volume), a
//     downwardAPI (pod-info) and a Secret (server-certs) (deploy.go,
//     makePodSpec).
func revisionPod(t *testing.T, d doc) corev1.PodTemplateSpec {
	t.Helper()
	var pod corev1.PodTemplateSpec
	toTyped(t, d, &pod.ObjectMeta, "spec", "template", "metadata")
	toTyped(t, d, &pod.Spec, "spec", "template", "spec")
	if pod.Spec.SecurityContext != nil {
		t.Errorf("%s: a pod-level securityContext, which Knative refuses unless config-features enables kubernetes.podspec-securitycontext: set it per container", d)
	}
	for i := range pod.Spec.Containers {
		pod.Spec.Containers[i].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
			HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(8022), Path: "/wait-for-drain"},
		}}
	}
	pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{
		Name:            "queue-proxy",
		Image:           "knative.dev/serving/cmd/queue",
		SecurityContext: restrictedContext(),
	})
	pod.Spec.Volumes = append(pod.Spec.Volumes,
		corev1.Volume{Name: "knative-var-log", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		corev1.Volume{Name: "knative-token-volume", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: "a", Path: "a"}}},
		}}},
		corev1.Volume{Name: "pod-info", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{}}},
		corev1.Volume{Name: "server-certs", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "serving-certs"}}},
	)
	return pod
}

// apiServerSourcePod is the pod of the adapter Deployment that Knative
// Eventing's controller makes in the namespace of the ApiServerSource d
// (knative/eventing pkg/reconciler/apiserversource/resources/
// receive_adapter.go, MakeReceiveAdapter, alike on release-1.22 and on main
// in June 2026): no pod-level securityContext; the source's
// serviceAccountName; one container, receive-adapter, with
// allowPrivilegeEscalation false, readOnlyRootFilesystem true, runAsNonRoot
// true, capabilities drop ALL and seccompProfile RuntimeDefault; a projected
// volume of the namespace's trust bundles if there are any
// (pkg/eventingtls/trust_bundle.go); and, since Eventing 1.16
// (knative/eventing#8205), the label and annotation
// sidecar.istio.io/inject=true, which has Istio inject its sidecar even in
// a namespace without an injection label: TestIstioSidecarInTheNamespace.
func apiServerSourcePod(t *testing.T, d doc) corev1.PodTemplateSpec {
	t.Helper()
	var spec struct {
		ServiceAccountName string `json:"serviceAccountName"`
	}
	toTyped(t, d, &spec, "spec")
	inject := map[string]string{"sidecar.istio.io/inject": "true"}
	pod := corev1.PodTemplateSpec{}
	pod.Labels, pod.Annotations = inject, inject
	pod.Spec = corev1.PodSpec{
		ServiceAccountName: spec.ServiceAccountName,
		EnableServiceLinks: ptr.To(false),
		Containers: []corev1.Container{{
			Name:            "receive-adapter",
			Image:           "knative.dev/eventing/cmd/apiserver_receive_adapter",
			SecurityContext: restrictedContext(),
		}},
		Volumes: []corev1.Volume{{Name: "kne-bundle", VolumeSource: corev1.VolumeSource{
			Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{
				ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "bundle"}},
			}}},
		}}},
	}
	return pod
}

// withIstioSidecar is pod with the sidecar Istio's injection template adds
// (manifests/charts/istio-control/istio-discovery/files/injection-template.yaml
// of the istio.io/istio hack/tools/istio requires), with its defaults
// global.proxy.privileged false and no interception mode but REDIRECT:
//   - without Istio's CNI (pilot.cni.enabled false, the default), an init
//     container istio-init that sets up iptables as root: capabilities add
//     NET_ADMIN and NET_RAW, runAsUser 0, runAsNonRoot false;
//   - with it, an init container istio-validation instead, as the proxy's
//     user 1337 with every capability dropped;
//   - istio-proxy itself: user 1337, runAsNonRoot true, capabilities drop
//     ALL, allowPrivilegeEscalation false;
//   - a seccompProfile on each of them only if global.proxy.seccompProfile
//     is set (default {}); the templates of Istio 1.28 and later have that
//     value, those of 1.24, 1.26 and 1.27 have not;
//   - emptyDir, projected, downwardAPI and configMap volumes, all of which
//     restricted allows.
func withIstioSidecar(pod corev1.PodTemplateSpec, cni, seccomp bool) corev1.PodTemplateSpec {
	pod = *pod.DeepCopy()
	proxy := &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		Privileged:               ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		RunAsNonRoot:             ptr.To(true),
		RunAsUser:                ptr.To(int64(1337)),
		RunAsGroup:               ptr.To(int64(1337)),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	init := corev1.Container{Name: "istio-validation", SecurityContext: proxy.DeepCopy()}
	if !cni {
		init = corev1.Container{Name: "istio-init", SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false),
			Privileged:               ptr.To(false),
			ReadOnlyRootFilesystem:   ptr.To(false),
			RunAsNonRoot:             ptr.To(false),
			RunAsUser:                ptr.To(int64(0)),
			RunAsGroup:               ptr.To(int64(0)),
			Capabilities: &corev1.Capabilities{
				Add: []corev1.Capability{"NET_ADMIN", "NET_RAW"}, Drop: []corev1.Capability{"ALL"},
			},
		}}
	}
	sidecar := corev1.Container{Name: "istio-proxy", SecurityContext: proxy}
	if seccomp {
		for _, c := range []*corev1.Container{&init, &sidecar} {
			c.SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
		}
	}
	pod.Spec.InitContainers = append(pod.Spec.InitContainers, init)
	pod.Spec.Containers = append(pod.Spec.Containers, sidecar)
	pod.Spec.Volumes = append(pod.Spec.Volumes,
		corev1.Volume{Name: "istio-envoy", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
		corev1.Volume{Name: "istio-podinfo", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{}}},
		corev1.Volume{Name: "istio-token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: "istio-ca", Path: "istio-token"}}},
		}}},
		corev1.Volume{Name: "istiod-ca-cert", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "istio-ca-root-cert"},
		}}},
	)
	return pod
}

// TestIstioSidecarInTheNamespace says what the namespace's level asks of
// a cluster's Istio. Istio injects a sidecar into a pod of istio-aux's
// namespace when the pod asks for one (config/eventing's adapters do, see
// apiServerSourcePod) or when the namespace is labelled for injection or
// Istio injects everywhere (sidecarInjectorWebhook.enableNamespacesByDefault:
// then the function's pods too; istio-aux's own Deployments and NATS opt
// out). Such a pod is refused unless Istio runs with its CNI and
// global.proxy.seccompProfile {type: RuntimeDefault} (Istio 1.28 on has it);
// otherwise label the namespace istio-injection=disabled (the webhook, the
// bridge and NATS opt out of the sidecar already). baseline would not
// help: Istio's own init container breaks it too.
func TestIstioSidecarInTheNamespace(t *testing.T) {
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var enforce psaapi.LevelVersion
	for _, m := range namespaceLevels(t) {
		if slices.Contains(m.modes, "enforce") {
			enforce = m.lv
		}
	}
	baseline := psaapi.LevelVersion{Level: psaapi.LevelBaseline, Version: enforce.Version}
	adapter := apiServerSourcePod(t, find(t, loadDocs(t, "config/eventing", nil), "ApiServerSource", "istio-aux-pods"))
	for _, tc := range []struct {
		name                      string
		cni, seccomp              bool
		wantEnforce, wantBaseline bool // allowed
	}{
		{name: "Istio's defaults: istio-init", wantEnforce: false, wantBaseline: false},
		{name: "Istio's CNI without seccompProfile", cni: true, wantEnforce: false, wantBaseline: true},
		{name: "Istio's CNI and global.proxy.seccompProfile RuntimeDefault", cni: true, seccomp: true, wantEnforce: true, wantBaseline: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := withIstioSidecar(adapter, tc.cni, tc.seccomp)
			for _, c := range []struct {
				lv   psaapi.LevelVersion
				want bool
			}{{enforce, tc.wantEnforce}, {baseline, tc.wantBaseline}} {
				r := policy.AggregateCheckResults(eval.EvaluatePod(c.lv, &pod.ObjectMeta, &pod.Spec))
				t.Logf("%s: allowed %v %s", c.lv.String(), r.Allowed, r.ForbiddenDetail())
				if r.Allowed != c.want {
					t.Errorf("an ApiServerSource's adapter with Istio's sidecar at %s: allowed %v, want %v (%s)", c.lv.String(), r.Allowed, c.want, r.ForbiddenDetail())
				}
			}
		})
	}
}
