//go:build e2e

package config

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/istio-aux/istio-aux/internal/settings"
	"github.com/istio-aux/istio-aux/pkg/names"
	"github.com/istio-aux/istio-aux/pkg/versions"
	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/mesh"
	"github.com/istio-aux/istio-aux/test/modroot"
	"github.com/istio-aux/istio-aux/test/poll"
)

// access reads a call written "verb resource[/subresource][.group]
// [namespace/name]" ("get secrets istio-aux/", "list pods").
func access(call string) *authorizationv1.ResourceAttributes {
	f := strings.Fields(call)
	a := &authorizationv1.ResourceAttributes{Verb: f[0]}
	a.Resource, a.Group, _ = strings.Cut(f[1], ".")
	a.Resource, a.Subresource, _ = strings.Cut(a.Resource, "/")
	if len(f) > 2 {
		a.Namespace, a.Name, _ = strings.Cut(f[2], "/")
	}
	return a
}

// TestRBAC installs config/'s accounts and roles for real and asks the API
// server, with SubjectAccessReviews, whether each component may make exactly
// the calls its code makes, and may not make the ones it must not.
func TestRBAC(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := startWithConfig(ctx, t, cluster.Options{})

	// config-istio-aux's quit-command and the exec policies (204, 205)
	// decide what the function may run in every opted-in proxy: no
	// component of ours may change either.
	deniedToAll := []string{
		"update configmaps istio-aux/config-istio-aux", "patch configmaps istio-aux/config-istio-aux",
		"delete configmaps istio-aux/config-istio-aux", "create configmaps istio-aux/",
		"update validatingadmissionpolicies.admissionregistration.k8s.io /istio-aux-proxyquit-exec",
		"delete validatingadmissionpolicybindings.admissionregistration.k8s.io /istio-aux-proxyquit-exec-command",
		"create validatingadmissionpolicybindings.admissionregistration.k8s.io",
	}
	for _, tc := range []struct {
		sa              string
		allowed, denied []string
	}{{
		sa:      "istio-aux-bridge",
		allowed: []string{"list pods", "watch pods", "list namespaces", "watch namespaces"},
		denied:  []string{"get pods default/", "create pods/exec default/", "get secrets istio-aux/", "delete pods default/"},
	}, {
		sa: "istio-aux-proxyquit",
		allowed: []string{"get pods team-a/", "get pods/exec team-a/", "create pods/exec team-a/", "get namespaces /team-a",
			"create events team-a/", "patch events team-a/", "delete events team-a/",
			// Which pods: the policy istio-aux-proxyquit-delete (TestDeletePolicy).
			"delete pods team-a/"},
		denied: []string{"list pods", "deletecollection pods team-a/", "update pods team-a/", "create pods/eviction team-a/",
			"create pods/attach team-a/", "get secrets team-a/", "list namespaces"},
	}, {
		sa: "istio-aux-webhook",
		allowed: []string{
			"list mutatingwebhookconfigurations.admissionregistration.k8s.io",
			"update mutatingwebhookconfigurations.admissionregistration.k8s.io /istio-aux-webhook",
			"get secrets istio-aux/istio-aux-webhook-certs", "update secrets istio-aux/istio-aux-webhook-certs",
			"watch configmaps istio-aux/", "create leases.coordination.k8s.io istio-aux/", "watch namespaces",
		},
		denied: []string{
			"update mutatingwebhookconfigurations.admissionregistration.k8s.io /istio-sidecar-injector",
			"get secrets default/istio-aux-webhook-certs", "create secrets istio-aux/", "update configmaps istio-aux/",
			"create leases.coordination.k8s.io kube-system/", "list pods",
		},
	}} {
		user := "system:serviceaccount:istio-aux:" + tc.sa
		review := func(call string, want bool) {
			r, err := c.Client().AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:istio-aux", "system:authenticated"}, ResourceAttributes: access(call),
			}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if r.Status.Allowed != want {
				t.Errorf("%s %q: allowed=%v, want %v", user, call, r.Status.Allowed, want)
			}
		}
		for _, call := range tc.allowed {
			review(call, true)
		}
		for _, call := range append(tc.denied, deniedToAll...) {
			review(call, false)
		}
	}
}

// TestWebhookRunsWithItsRole runs the real webhook binary as its own
// ServiceAccount (a TokenRequest token, not admin), with leader election on,
// and expects it to do its job with config/'s RBAC alone: fill the empty
// Secret with a certificate and put the CA into every webhook's caBundle,
// with no "forbidden" in its log.
func TestWebhookRunsWithItsRole(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := startWithConfig(ctx, t, cluster.Options{})
	log := runWebhook(ctx, t, c)
	leases, err := c.Client().CoordinationV1().Leases("istio-aux").List(ctx, metav1.ListOptions{})
	if err != nil || len(leases.Items) == 0 {
		t.Errorf("no leader-election Lease in istio-aux (err %v)", err)
	}
	if lines := grepLines(log.String(), "forbidden"); lines != "" {
		t.Errorf("the webhook was refused something by RBAC:\n%s", lines)
	}
}

// runWebhook runs the real webhook binary as istio-aux-webhook, as config/
// configures it, until it has issued its certificate into its Secret and
// written it as every webhook's caBundle, or fails the test.
func runWebhook(ctx context.Context, t *testing.T, c *cluster.Cluster) *syncBuffer {
	t.Helper()
	ports, err := cluster.FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	log, start := runAs(ctx, t, c, "istio-aux-webhook", "./webhook/cmd/webhook",
		"SYSTEM_NAMESPACE=istio-aux", "WEBHOOK_NAME=istio-aux-webhook",
		"WEBHOOK_SECRET_NAME=istio-aux-webhook-certs", "WEBHOOK_PORT="+strconv.Itoa(ports[0]),
		"PROFILING_PORT="+strconv.Itoa(ports[1]), "METRICS_ADDR=127.0.0.1:"+strconv.Itoa(ports[2]),
		"ISTIO_AUX_DISABLE_HEALTH_PROBES=true",
		// As config/ ships it.
		"KUBERNETES_MIN_VERSION="+versions.MinKubernetes,
	)

	err = poll.Until(ctx, 90*time.Second, func(ctx context.Context) (bool, error) {
		s, err := c.Client().CoreV1().Secrets("istio-aux").Get(ctx, "istio-aux-webhook-certs", metav1.GetOptions{})
		if err != nil || len(s.Data["ca-cert.pem"]) == 0 {
			return false, nil
		}
		mwc, err := c.Client().AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "istio-aux-webhook", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, w := range mwc.Webhooks {
			if !bytes.Equal(w.ClientConfig.CABundle, s.Data["ca-cert.pem"]) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the webhook did not fill the Secret and the caBundles: %v", err)
	}
	t.Logf("certificate and caBundles in place %v after start", time.Since(start).Round(time.Millisecond))
	return log
}

// TestBridgeRunsWithItsRole runs the real bridge binary (ISTIO_AUX_ROLE
// bridge, embedded NATS) as istio-aux-bridge and expects /readyz to answer
// 200, which needs its pod and namespace informers synced: list and watch
// granted by 202-rbac-bridge.yaml and nothing more.
func TestBridgeRunsWithItsRole(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := startWithConfig(ctx, t, cluster.Options{})
	port, err := cluster.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	log, start := runAs(ctx, t, c, "istio-aux-bridge", "./bridge/cmd/bridge",
		"ISTIO_AUX_ROLE=bridge", "NATS_URL=", "ISTIO_AUX_DATA_DIR="+t.TempDir(), "METRICS_ADDR="+addr,
		// It reads and watches config-logging and config-istio-aux there
		// (204-rbac-logging.yaml).
		"SYSTEM_NAMESPACE=istio-aux")
	err = poll.Until(ctx, 60*time.Second, func(ctx context.Context) (bool, error) {
		return cluster.GetOK(ctx, "http://"+addr+"/readyz") == nil, nil
	})
	if err != nil {
		t.Fatalf("the bridge never became ready: %v", err)
	}
	t.Logf("bridge ready %v after start", time.Since(start).Round(time.Millisecond))
	if lines := grepLines(log.String(), "forbidden"); lines != "" {
		t.Errorf("the bridge was refused something by RBAC:\n%s", lines)
	}
	if strings.Contains(log.String(), "config-logging is unreadable") {
		t.Errorf("the bridge could not read config-logging:\n%s", grepLines(log.String(), "config-logging"))
	}

	// It follows config-istio-aux with that role alone: a value it cannot
	// use is said on the ConfigMap, and a new nats-url makes it start again
	// (NATS_URL is set, as config/ sets it from that key).
	setConfig(ctx, t, c, map[string]string{settings.KeyQuitNative: "yes please"})
	err = poll.Until(ctx, 30*time.Second, func(context.Context) (bool, error) {
		return slices.ContainsFunc(mesh.Events(t, c, "istio-aux", names.ConfigMap), func(e corev1.Event) bool {
			return e.Reason == settings.ReasonRejected && e.Source.Component == names.SourceBridge && strings.Contains(e.Message, settings.KeyQuitNative)
		}), nil
	})
	if err != nil {
		t.Errorf("no %s Event from the bridge on %s: %v\n%s", settings.ReasonRejected, names.ConfigMap, err, grepLines(log.String(), "setting"))
	}
	setConfig(ctx, t, c, map[string]string{settings.KeyNATSURL: "nats://elsewhere.example:4222"})
	err = poll.Until(ctx, 30*time.Second, func(context.Context) (bool, error) {
		return strings.Contains(log.String(), "Stopping to start again"), nil
	})
	if err != nil {
		t.Errorf("the bridge did not stop for a new nats-url: %v\n%s", err, grepLines(log.String(), "nats"))
	}
}

// setConfig merges data into config-istio-aux.
func setConfig(ctx context.Context, t *testing.T, c *cluster.Cluster, data map[string]string) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"data": data})
	if _, err := c.Client().CoreV1().ConfigMaps("istio-aux").Patch(ctx, names.ConfigMap, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// runAs builds pkg and runs it with a kubeconfig of the ServiceAccount and
// the given environment; it is killed at cleanup (its log printed if the
// test failed). It returns the log and the time the process started.
func runAs(ctx context.Context, t *testing.T, c *cluster.Cluster, serviceAccount, pkg string, env ...string) (*syncBuffer, time.Time) {
	t.Helper()
	start := time.Now()
	bin := filepath.Join(t.TempDir(), filepath.Base(pkg))
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg)
	build.Dir = modroot.Dir()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	t.Logf("built %s in %v", pkg, time.Since(start).Round(time.Millisecond))
	log := &syncBuffer{}
	p, err := cluster.StartProcess(filepath.Base(pkg), log,
		append([]string{"KUBECONFIG=" + serviceAccountKubeconfig(ctx, t, c, serviceAccount)}, env...), bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Killed, not stopped: graceful shutdown (knative's webhook drains
		// for 45s) is not what these tests exercise.
		_ = p.Kill()
		if t.Failed() {
			t.Logf("%s log:\n%s", pkg, log.String())
		}
	})
	return log, time.Now()
}

// syncBuffer is a bytes.Buffer safe for the process's writes and the
// test's reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startWithConfig starts a control plane (opts) and installs, for real,
// config/'s documents that need no Knative CRD (with ko:// placeholders).
func startWithConfig(ctx context.Context, t *testing.T, opts cluster.Options) *cluster.Cluster {
	t.Helper()
	c, a := start(ctx, t, opts)
	applyConfig(ctx, t, a)
	return c
}

// applyConfig applies config/'s documents for real but the Knative ones
// (no Knative CRDs here) and returns those it applied.
func applyConfig(ctx context.Context, t *testing.T, a *applier) []doc {
	t.Helper()
	var applied []doc
	for _, d := range loadDocs(t, "config", placeholder) {
		if !strings.Contains(d.obj.GetAPIVersion(), "knative.dev") {
			a.create(ctx, t, d)
			applied = append(applied, d)
		}
	}
	return applied
}

// serviceAccountKubeconfig writes a kubeconfig that authenticates as the
// ServiceAccount with a short-lived TokenRequest token, and checks it works.
func serviceAccountKubeconfig(ctx context.Context, t *testing.T, c *cluster.Cluster, name string) string {
	t.Helper()
	tr, err := c.Client().CoreV1().ServiceAccounts("istio-aux").CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s: %v", name, err)
	}
	path, err := c.WriteKubeconfig("sa-"+name, c.RESTConfig().Host, name, &clientcmdapi.AuthInfo{Token: tr.Status.Token})
	if err != nil {
		t.Fatal(err)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kubernetes.NewForConfigOrDie(rc).Discovery().ServerVersion(); err != nil {
		t.Fatalf("%s's kubeconfig does not work: %v", name, err)
	}
	return path
}

// grepLines is the lines of s that, lower-cased, contain substr.
func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(strings.ToLower(l), substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
