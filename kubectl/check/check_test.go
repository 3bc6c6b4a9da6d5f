package check_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/istio-aux/istio-aux/kubectl/check"
	"github.com/istio-aux/istio-aux/webhook/admission"
)

// expect is an item's expected status and a part of its message.
type expect struct {
	status check.Status
	says   string
}

// TestCheck: a healthy install of each shape, then one fault at a time.
// Items not listed must be OK.
func TestCheck(t *testing.T) {
	now := time.Now()
	tests := map[string]struct {
		cluster func(*testing.T, time.Time) *cluster
		change  func(*testing.T, *cluster)
		shape   string
		want    map[string]expect
	}{
		"healthy install (config/)": {cluster: healthy, shape: check.ShapeConfig, want: map[string]expect{
			check.ItemKubernetes:           {check.StatusOK, "API server v1.33.13, kubelets v1.32.13 ×2, v1.33.13 ×1: within the Kubernetes the suites prove (1.31 to 1.36)"},
			check.ItemWebhookConfiguration: {check.StatusOK, "3 webhooks, caBundle matches Secret istio-aux/istio-aux-webhook-certs, failurePolicy Fail"},
			check.ItemWebhookCertificate:   {check.StatusOK, "issued for istio-aux-webhook.istio-aux.svc"},
			check.ItemWebhookEndpoints:     {check.StatusOK, "2 endpoints ready"},
			check.ItemConfig:               {check.StatusOK, "mode hold, extra sidecars none, quit-native off, quit-command the default"},
			check.ItemExecPolicy:           {check.StatusOK, "(3 bindings), param ConfigMap istio-aux/config-istio-aux present"},
			check.ItemWatcher:              {check.StatusOK, "pod istio-aux-bridge-a watches (Ready, Lease istio-aux-watcher renewed 3s ago)"},
			check.ItemWatchedNamespaces:    {check.StatusOK, "3 namespaces watched (2 whole, 1 labelled pods only)"},
			check.ItemNATS:                 {check.StatusOK, "StatefulSet istio-aux-nats: 3/3 ready"},
			check.ItemBacklog:              {check.StatusOK, "4 events wait for delivery (read from istio-aux-bridge-a)"},
			check.ItemFunction:             {check.StatusOK, "Knative Service proxy-quit Ready (revision proxy-quit-00001)"},
			check.ItemFunctionNodeLoss: {check.StatusOK, "min-scale 2, spread by kubernetes.io/hostname, ready pods on 2 nodes (checked: the Service's " +
				"autoscaling.knative.dev/min-scale (else config-autoscaler min-scale), its topologySpreadConstraints or required podAntiAffinity on " +
				"kubernetes.io/hostname, config-features kubernetes.podspec-topologyspreadconstraints, and where its ready pods run)"},
		}},
		"healthy install (config/standalone/)": {cluster: standalone, shape: check.ShapeStandalone, want: map[string]expect{
			check.ItemNATS:     {check.StatusOK, "embedded in Deployment istio-aux-allinone"},
			check.ItemFunction: {check.StatusOK, "in-process in Deployment istio-aux-allinone (1/1 ready)"},
			check.ItemBacklog:  {check.StatusOK, "0 events wait for delivery (read from istio-aux-allinone-a)"},
		}},
		"an API server and a kubelet older than the suites prove": {cluster: healthy, shape: check.ShapeConfig,
			change: func(t *testing.T, c *cluster) {
				c.server = "v1.30.14-eks-1a2b3c"
				c.replace(node("node-2", "v1.29.15"))
			},
			want: map[string]expect{check.ItemKubernetes: {check.StatusWarn,
				"API server v1.30.14-eks-1a2b3c, kubelet v1.29.15 (node node-2) outside the Kubernetes the suites prove (1.31 to 1.36; https://github.com/istio-aux/istio-aux#compatibility)"}}},
		"a kubelet newer than the suites prove": {cluster: healthy, shape: check.ShapeConfig,
			change: func(t *testing.T, c *cluster) { c.replace(node("node-0", "v1.37.2")) },
			want:   map[string]expect{check.ItemKubernetes: {check.StatusWarn, "kubelet v1.37.2 (node node-0) outside the Kubernetes the suites prove"}}},
		"the exec policy's binding deleted": {cluster: healthy, shape: check.ShapeConfig,
			change: func(t *testing.T, c *cluster) {
				c.without("ValidatingAdmissionPolicyBinding", "istio-aux-proxyquit-exec")
			},
			want: map[string]expect{check.ItemExecPolicy: {check.StatusFail,
				"binding istio-aux-proxyquit-exec is missing: without them the function may exec anything"}}},
		"the command binding's param is gone": {cluster: healthy, shape: check.ShapeConfig,
			change: func(t *testing.T, c *cluster) { c.without("ConfigMap", "config-istio-aux") },
			want: map[string]expect{
				check.ItemConfig:     {check.StatusFail, "ConfigMap istio-aux/config-istio-aux is missing"},
				check.ItemExecPolicy: {check.StatusFail, "binding istio-aux-proxyquit-exec-command's param, ConfigMap istio-aux/config-istio-aux, is missing"},
				check.ItemNATS:       {check.StatusOK, "3/3 ready"}}},
		"a binding that only warns": {cluster: healthy, shape: check.ShapeConfig,
			change: func(t *testing.T, c *cluster) {
				c.replace(&admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "istio-aux-proxyquit-exec"},
					Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "istio-aux-proxyquit-exec",
						ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Warn}}})
			},
			want: map[string]expect{check.ItemExecPolicy: {check.StatusFail, "binding istio-aux-proxyquit-exec does not deny"}}},
		"the webhook configuration missing": {cluster: healthy, shape: check.ShapeConfig,
			change: func(t *testing.T, c *cluster) { c.without("MutatingWebhookConfiguration", "istio-aux-webhook") },
			want:   map[string]expect{check.ItemWebhookConfiguration: {check.StatusFail, "is missing: no pod gets the hold"}}},
		"a caBundle behind the Secret": {cluster: healthy, shape: check.ShapeConfig,
			change: func(t *testing.T, c *cluster) {
				c.replace(&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "istio-aux-webhook"},
					Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "enabled.istio-aux.dev", ClientConfig: admissionregistrationv1.WebhookClientConfig{CABundle: []byte("old")}}}})
			},
			want: map[string]expect{check.ItemWebhookConfiguration: {check.StatusFail,
				"webhook enabled.istio-aux.dev's caBundle is not the ca-cert.pem of Secret istio-aux/istio-aux-webhook-certs; webhook legacy.istio-aux.dev is missing"}}},
		"a certificate about to expire": {cluster: healthy, shape: check.ShapeConfig,
			change: func(t *testing.T, c *cluster) { c.expiring(t, now.Add(2*time.Hour)) },
			want:   map[string]expect{check.ItemWebhookCertificate: {check.StatusWarn, "expires in 2h0m0s"}}},
		"an expired certificate": {cluster: healthy, shape: check.ShapeConfig,
			change: func(t *testing.T, c *cluster) { c.expiring(t, now.Add(-time.Minute)) },
			want: map[string]expect{check.ItemWebhookCertificate: {check.StatusFail,
				"the API server cannot call the webhook, and refuses opted-in pods (failurePolicy Fail), which their controllers create again"}}},
		"an expired certificate, one webhook set to Ignore": {cluster: healthy, shape: check.ShapeConfig,
			change: func(t *testing.T, c *cluster) {
				c.expiring(t, now.Add(-time.Minute))
				c.ignoring("pods.istio-aux.dev")
			},
			want: map[string]expect{
				check.ItemWebhookConfiguration: {check.StatusWarn, "webhook pods.istio-aux.dev has failurePolicy Ignore, not Fail"},
				check.ItemWebhookCertificate: {check.StatusFail,
					"and refuses opted-in pods (failurePolicy Fail), but admits without the hold those that webhook pods.istio-aux.dev sees (failurePolicy Ignore)"}}},
		"a webhook set to Ignore": {cluster: healthy, shape: check.ShapeConfig,
			change: func(t *testing.T, c *cluster) { c.ignoring("enabled.istio-aux.dev") },
			want: map[string]expect{check.ItemWebhookConfiguration: {check.StatusWarn,
				"webhook enabled.istio-aux.dev has failurePolicy Ignore, not Fail: when a call fails, the API server admits opted-in pods without the hold. " +
					"The webhook's reconciler writes Fail whenever it runs"}}},
		"a webhook set to Ignore, with a caBundle behind": {cluster: healthy, shape: check.ShapeConfig,
			change: func(t *testing.T, c *cluster) {
				c.replace(&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "istio-aux-webhook"},
					Webhooks: admission.Webhooks(sys, admissionregistrationv1.WebhookClientConfig{CABundle: []byte("old")})})
				c.ignoring("legacy.istio-aux.dev")
			},
			want: map[string]expect{check.ItemWebhookConfiguration: {check.StatusFail,
				"webhook pods.istio-aux.dev's caBundle is not the ca-cert.pem of Secret istio-aux/istio-aux-webhook-certs; " +
					"webhook legacy.istio-aux.dev has failurePolicy Ignore, not Fail: the webhook's reconciler keeps them current"}}},
		"an empty certificate Secret": {cluster: healthy, shape: check.ShapeConfig,
			change: func(t *testing.T, c *cluster) {
				c.replace(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: sys, Name: "istio-aux-webhook-certs"}})
			},
			want: map[string]expect{
				check.ItemWebhookConfiguration: {check.StatusFail, "caBundle is not the ca-cert.pem"},
				check.ItemWebhookCertificate:   {check.StatusFail, "holds no certificate in server-cert.pem: the webhook has not issued one yet"}}},
		"no webhook endpoint ready": {cluster: healthy, shape: check.ShapeConfig,
			change: func(t *testing.T, c *cluster) {
				c.replace(webhookSlice(discoveryv1.Endpoint{Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}}))
			},
			want: map[string]expect{check.ItemWebhookEndpoints: {check.StatusFail,
				"has no ready endpoint: the API server refuses opted-in pods (failurePolicy Fail)"}}},
		"no webhook endpoint ready, every webhook set to Ignore": {cluster: healthy, shape: check.ShapeConfig,
			change: func(t *testing.T, c *cluster) {
				c.replace(webhookSlice(discoveryv1.Endpoint{Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}}))
				c.ignoring()
			},
			want: map[string]expect{
				check.ItemWebhookConfiguration: {check.StatusWarn,
					"webhooks enabled.istio-aux.dev, legacy.istio-aux.dev, pods.istio-aux.dev have failurePolicy Ignore, not Fail"},
				check.ItemWebhookEndpoints: {check.StatusFail,
					"Service istio-aux/istio-aux-webhook has no ready endpoint: the API server admits opted-in pods without the hold (failurePolicy Ignore)"}}},
		"one webhook replica down": {cluster: healthy, shape: check.ShapeConfig,
			change: func(t *testing.T, c *cluster) {
				c.replace(webhookSlice(discoveryv1.Endpoint{}))
			},
			want: map[string]expect{check.ItemWebhookEndpoints: {check.StatusWarn, "1 of 2 endpoints ready"}}},
		"a stale Lease": {cluster: healthy, shape: check.ShapeConfig,
			change: func(t *testing.T, c *cluster) { c.replace(lease("istio-aux-bridge-a", now.Add(-time.Minute))) },
			want:   map[string]expect{check.ItemWatcher: {check.StatusFail, "was last renewed 1m0s ago (it lasts 15s)"}}},
		"a Lease held by a pod that is gone": {cluster: healthy, shape: check.ShapeConfig,
			change: func(t *testing.T, c *cluster) { c.without("Pod", "istio-aux-bridge-a") },
			want: map[string]expect{
				check.ItemWatcher: {check.StatusFail, "held by pod istio-aux-bridge-a, which does not exist"},
				check.ItemBacklog: {check.StatusOK, "read from istio-aux-bridge-b"}}},
		"a holder that is not Ready": {cluster: healthy, shape: check.ShapeConfig,
			change: func(t *testing.T, c *cluster) { c.replace(pod("istio-aux-bridge-a", "bridge", false)) },
			want:   map[string]expect{check.ItemWatcher: {check.StatusFail, "which is not Ready"}}},
		"no Lease, a bridge from before leader election": {cluster: healthy, shape: check.ShapeConfig,
			change: func(t *testing.T, c *cluster) { c.without("Lease", "istio-aux-watcher") },
			want:   map[string]expect{check.ItemWatcher: {check.StatusWarn, "Deployment istio-aux-bridge (2/2 ready) elects no leader"}}},
		"a misspelt key in the settings": {cluster: healthy, shape: check.ShapeConfig,
			change: func(t *testing.T, c *cluster) {
				c.replace(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: sys, Name: "config-istio-aux"},
					Data: map[string]string{"nats-url": "nats://istio-aux-nats.istio-aux.svc.cluster.local:4222", "sidecar": "vault-agent"}})
			},
			want: map[string]expect{check.ItemConfig: {check.StatusWarn,
				`extra sidecars none, quit-native off, quit-command the default; ignored, as no component reads it: key "sidecar" (did you mean "sidecars"?)`}}},
		"no namespace opted in": {cluster: healthy, shape: check.ShapeConfig,
			change: func(t *testing.T, c *cluster) {
				for _, n := range []string{"jobs", "legacy", "some"} {
					c.without("Namespace", n)
				}
			},
			want: map[string]expect{check.ItemWatchedNamespaces: {check.StatusWarn, "no namespace is opted in"}}},
		"NATS down": {cluster: healthy, shape: check.ShapeConfig,
			change: func(t *testing.T, c *cluster) { c.replace(statefulSet(3, 0)) },
			want:   map[string]expect{check.ItemNATS: {check.StatusFail, "no replica ready of 3"}}},
		"a NATS server crash-looping, and why": {cluster: healthy, shape: check.ShapeConfig,
			change: func(t *testing.T, c *cluster) {
				c.replace(statefulSet(3, 2))
				p := pod("istio-aux-nats-1", "nats", false)
				p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "nats", RestartCount: 4,
					State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
					LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1,
						Message: "[1] starting\nnats-server: variable reference for 'NATS_TOKEN' on line 69 could not be parsed\n"}}}}
				c.replace(p)
				c.replace(pod("istio-aux-nats-0", "nats", true))
			},
			want: map[string]expect{check.ItemNATS: {check.StatusWarn, "2 of 3 replicas ready (istio-aux-nats-1: container nats CrashLoopBackOff, " +
				"exited 1: nats-server: variable reference for 'NATS_TOKEN' on line 69 could not be parsed (4 restarts))"}}},
		"a NATS server not scheduled": {cluster: healthy, shape: check.ShapeConfig,
			change: func(t *testing.T, c *cluster) {
				c.replace(statefulSet(3, 0))
				p := pod("istio-aux-nats-2", "nats", false)
				p.Status.Phase, p.Status.Conditions = corev1.PodPending, []corev1.PodCondition{{Type: corev1.PodScheduled,
					Status: corev1.ConditionFalse, Message: "0/3 nodes are available: 3 node(s) didn't match pod topology spread constraints."}}
				c.replace(p)
			},
			want: map[string]expect{check.ItemNATS: {check.StatusFail, "nothing is published or delivered (istio-aux-nats-2: Pending, PodScheduled: 0/3 nodes are available"}}},
		"a backlog": {cluster: healthy, shape: check.ShapeConfig,
			change: func(t *testing.T, c *cluster) { c.metrics["istio-aux-bridge-a"] = "istio_aux_dispatch_backlog 2500\n" },
			want:   map[string]expect{check.ItemBacklog: {check.StatusWarn, "2500 events wait for delivery (read from istio-aux-bridge-a): deliveries are behind"}}},
		"no dispatcher serves the gauge": {cluster: healthy, shape: check.ShapeConfig,
			change: func(t *testing.T, c *cluster) {
				c.metrics = map[string]string{"istio-aux-bridge-a": "other 1\n", "istio-aux-bridge-b": "other 1\n"}
			},
			want: map[string]expect{check.ItemBacklog: {check.StatusWarn, "no dispatcher serves istio_aux_dispatch_backlog"}}},
		"the function not Ready": {cluster: healthy, shape: check.ShapeConfig,
			change: func(t *testing.T, c *cluster) { c.ksvc = ksvc("False", "RevisionFailed") },
			want:   map[string]expect{check.ItemFunction: {check.StatusFail, "not Ready: RevisionFailed: revision failed"}}},
		"the function at Knative's defaults": {cluster: healthy, shape: check.ShapeConfig,
			change: func(t *testing.T, c *cluster) {
				c.atKnativeDefaults()
				c.without("ConfigMap", "config-features")
				c.replace(functionPod("proxy-quit-00001-deployment-b", "node-0"))
			},
			want: map[string]expect{check.ItemFunctionNodeLoss: {check.StatusWarn, "a node's loss would stop quits for minutes: " +
				"min-scale 0 (config-autoscaler min-scale): a lone pod's node lost stops quits until its eviction, about 6 minutes; " +
				"set autoscaling.knative.dev/min-scale: \"2\"; config-features kubernetes.podspec-topologyspreadconstraints is \"disabled\", " +
				"and the Service has no spread: its pods may share a node; enable the flag and spread them by kubernetes.io/hostname (docs/install.md); " +
				"its ready pods run on 1 node(s) now"}}},
		"min-scale from config-autoscaler, the flag on, no spread": {cluster: healthy, shape: check.ShapeConfig,
			change: func(t *testing.T, c *cluster) {
				c.atKnativeDefaults()
				c.objects = append(c.objects, knativeConfig("config-autoscaler", map[string]string{"min-scale": "2"}))
			},
			want: map[string]expect{check.ItemFunctionNodeLoss: {check.StatusWarn, "minutes: the Service has no topologySpreadConstraints on " +
				"kubernetes.io/hostname with whenUnsatisfiable DoNotSchedule: its pods may share a node (docs/install.md) (checked:"}}},
		"one function pod not ready": {cluster: healthy, shape: check.ShapeConfig,
			change: func(t *testing.T, c *cluster) {
				p := functionPod("proxy-quit-00001-deployment-b", "node-1")
				p.Status.Conditions[0].Status = corev1.ConditionFalse
				c.replace(p)
			},
			want: map[string]expect{check.ItemFunctionNodeLoss: {check.StatusWarn, "minutes: its ready pods run on 1 node(s) now"}}},
		"no Knative: the function's stand-in Deployment": {cluster: healthy, shape: check.ShapeConfig,
			change: func(t *testing.T, c *cluster) {
				c.ksvc = nil
				c.objects = append(c.objects, deployment("proxy-quit", 1, 1))
			},
			want: map[string]expect{check.ItemFunction: {check.StatusOK, "Deployment proxy-quit (1/1 ready; no Knative Service)"}}},
		"no function at all": {cluster: healthy, shape: check.ShapeConfig,
			change: func(t *testing.T, c *cluster) { c.ksvc = nil },
			want:   map[string]expect{check.ItemFunction: {check.StatusFail, "not found (is Knative Serving installed?)"}}},
		"the all-in-one down": {cluster: standalone, shape: check.ShapeStandalone,
			change: func(t *testing.T, c *cluster) {
				c.replace(deployment("istio-aux-allinone", 1, 0))
				c.replace(pod("istio-aux-allinone-a", "allinone", false))
			},
			want: map[string]expect{
				check.ItemFunction: {check.StatusFail, "is not available (0/1 ready)"},
				check.ItemWatcher:  {check.StatusFail, "which is not Ready"},
				check.ItemBacklog:  {check.StatusWarn, "no Ready bridge, dispatcher or all-in-one pod"},
				check.ItemNATS:     {check.StatusOK, "embedded"}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := tc.cluster(t, now)
			if tc.change != nil {
				tc.change(t, c)
			}
			r := c.checker(now).Run(context.Background())
			if r.Shape != tc.shape {
				t.Errorf("shape %s, want %s", r.Shape, tc.shape)
			}
			var names []string
			failed := false
			for _, it := range r.Items {
				names = append(names, it.Name)
				w, listed := tc.want[it.Name]
				if !listed {
					w = expect{check.StatusOK, ""}
				}
				failed = failed || it.Status == check.StatusFail
				if it.Status != w.status || !strings.Contains(it.Message, w.says) {
					t.Errorf("%s: %s %q; want %s saying %q", it.Name, it.Status, it.Message, w.status, w.says)
				}
				if it.Status != check.StatusOK && it.Command == "" {
					t.Errorf("%s: %s without a command to show more", it.Name, it.Status)
				}
			}
			wantNames := []string{check.ItemKubernetes, check.ItemWebhookConfiguration, check.ItemWebhookCertificate, check.ItemWebhookEndpoints, check.ItemConfig,
				check.ItemExecPolicy, check.ItemWatcher, check.ItemWatchedNamespaces, check.ItemNATS, check.ItemBacklog, check.ItemFunction}
			if c.ksvc != nil {
				wantNames = append(wantNames, check.ItemFunctionNodeLoss)
			}
			if fmt.Sprint(names) != fmt.Sprint(wantNames) {
				t.Errorf("items %v, want %v", names, wantNames)
			}
			if r.OK == failed {
				t.Errorf("OK %v with an item failed: %v", r.OK, failed)
			}
		})
	}
}

// TestWatchedNamespacesListed: the namespaces behind the count, for
// --verbose, in order.
func TestWatchedNamespacesListed(t *testing.T) {
	now := time.Now()
	r := healthy(t, now).checker(now).Run(context.Background())
	for _, it := range r.Items {
		if it.Name == check.ItemWatchedNamespaces {
			if got, want := fmt.Sprint(it.Values), "[jobs legacy some (labelled pods only)]"; got != want {
				t.Errorf("values %s, want %s", got, want)
			}
			return
		}
	}
	t.Fatal("no watched-namespaces item")
}
