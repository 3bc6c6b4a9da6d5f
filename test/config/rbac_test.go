//go:build e2e

package config

import (
	"bytes"
	"context"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/istio-aux/istio-aux/internal/settings"
	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/modroot"
	"github.com/istio-aux/istio-aux/test/poll"
)

// TestRBAC installs config/'s accounts and roles for real and asks the API
// server, with SubjectAccessReviews, whether each component may make exactly
// the calls its code makes, and may not make the ones it must not.
func TestRBAC(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, _ := startWithConfig(ctx, t, cluster.Options{})

	type call struct {
		verb, resource, sub, ns, name string
		group                         string
	}
	sa := func(name string) string { return "system:serviceaccount:istio-aux:" + name }
	cases := []struct {
		user    string
		allowed []call
		denied  []call
	}{{
		user: sa("istio-aux-bridge"),
		allowed: []call{
			{verb: "list", resource: "pods"}, {verb: "watch", resource: "pods"},
			{verb: "list", resource: "namespaces"}, {verb: "watch", resource: "namespaces"},
		},
		denied: []call{
			{verb: "get", resource: "pods", ns: "default"}, {verb: "create", resource: "pods", sub: "exec", ns: "default"},
			{verb: "get", resource: "secrets", ns: "istio-aux"}, {verb: "delete", resource: "pods", ns: "default"},
		},
	}, {
		user: sa("istio-aux-proxyquit"),
		allowed: []call{
			{verb: "get", resource: "pods", ns: "team-a"},
			{verb: "get", resource: "pods", sub: "exec", ns: "team-a"},
			{verb: "create", resource: "pods", sub: "exec", ns: "team-a"},
			{verb: "get", resource: "namespaces", name: "team-a"},
			{verb: "create", resource: "events", ns: "team-a"}, {verb: "patch", resource: "events", ns: "team-a"},
		},
		denied: []call{
			{verb: "list", resource: "pods"}, {verb: "delete", resource: "pods", ns: "team-a"},
			{verb: "create", resource: "pods", sub: "attach", ns: "team-a"},
			{verb: "get", resource: "secrets", ns: "team-a"}, {verb: "list", resource: "namespaces"},
		},
	}, {
		user: sa("istio-aux-webhook"),
		allowed: []call{
			{verb: "list", resource: "mutatingwebhookconfigurations", group: "admissionregistration.k8s.io"},
			{verb: "update", resource: "mutatingwebhookconfigurations", group: "admissionregistration.k8s.io", name: "istio-aux-webhook"},
			{verb: "get", resource: "secrets", ns: "istio-aux", name: "istio-aux-webhook-certs"},
			{verb: "update", resource: "secrets", ns: "istio-aux", name: "istio-aux-webhook-certs"},
			{verb: "watch", resource: "configmaps", ns: "istio-aux"},
			{verb: "create", resource: "leases", group: "coordination.k8s.io", ns: "istio-aux"},
			{verb: "watch", resource: "namespaces"},
		},
		denied: []call{
			{verb: "update", resource: "mutatingwebhookconfigurations", group: "admissionregistration.k8s.io", name: "istio-sidecar-injector"},
			{verb: "get", resource: "secrets", ns: "default", name: "istio-aux-webhook-certs"},
			{verb: "create", resource: "secrets", ns: "istio-aux"},
			{verb: "update", resource: "configmaps", ns: "istio-aux"},
			{verb: "create", resource: "leases", group: "coordination.k8s.io", ns: "kube-system"},
			{verb: "list", resource: "pods"},
		},
	}}
	// config-istio-aux's quit-command and the exec policies (204, 205)
	// decide what the function may run in every opted-in proxy: no
	// component of ours may change either.
	const admissionGroup = "admissionregistration.k8s.io"
	for i := range cases {
		cases[i].denied = append(cases[i].denied,
			call{verb: "update", resource: "configmaps", ns: "istio-aux", name: "config-istio-aux"},
			call{verb: "patch", resource: "configmaps", ns: "istio-aux", name: "config-istio-aux"},
			call{verb: "delete", resource: "configmaps", ns: "istio-aux", name: "config-istio-aux"},
			call{verb: "create", resource: "configmaps", ns: "istio-aux"},
			call{verb: "update", resource: "validatingadmissionpolicies", group: admissionGroup, name: "istio-aux-proxyquit-exec"},
			call{verb: "delete", resource: "validatingadmissionpolicybindings", group: admissionGroup, name: "istio-aux-proxyquit-exec-command"},
			call{verb: "create", resource: "validatingadmissionpolicybindings", group: admissionGroup},
		)
	}
	for _, tc := range cases {
		for _, want := range []bool{true, false} {
			calls := tc.allowed
			if !want {
				calls = tc.denied
			}
			for _, cl := range calls {
				attrs := &authorizationv1.ResourceAttributes{Verb: cl.verb, Group: cl.group, Resource: cl.resource, Subresource: cl.sub, Namespace: cl.ns, Name: cl.name}
				r, err := c.Client().AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
					User: tc.user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:istio-aux", "system:authenticated"}, ResourceAttributes: attrs,
				}}, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if r.Status.Allowed != want {
					t.Errorf("%s %+v: allowed=%v, want %v", tc.user, *attrs, r.Status.Allowed, want)
				}
			}
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
	c, _ := startWithConfig(ctx, t, cluster.Options{})

	ports, err := cluster.FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	log, start := runAs(ctx, t, c, "istio-aux-webhook", "./webhook/cmd/webhook",
		"SYSTEM_NAMESPACE=istio-aux", "WEBHOOK_NAME=istio-aux-webhook",
		"WEBHOOK_SECRET_NAME=istio-aux-webhook-certs", "WEBHOOK_PORT="+strconv.Itoa(ports[0]),
		"PROFILING_PORT="+strconv.Itoa(ports[1]), "METRICS_ADDR=127.0.0.1:"+strconv.Itoa(ports[2]),
		"ISTIO_AUX_DISABLE_HEALTH_PROBES=true",
		// The harness's API server is a release build; say so explicitly
		// rather than depend on knative's minimum (1.34) here.
		"KUBERNETES_MIN_VERSION=v1.34.0",
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
	leases, err := c.Client().CoordinationV1().Leases("istio-aux").List(ctx, metav1.ListOptions{})
	if err != nil || len(leases.Items) == 0 {
		t.Errorf("no leader-election Lease in istio-aux (err %v)", err)
	}
	if strings.Contains(strings.ToLower(log.String()), "forbidden") {
		t.Errorf("the webhook was refused something by RBAC:\n%s", grepLines(log.String(), "forbidden"))
	}
}

// TestBridgeRunsWithItsRole runs the real bridge binary (ISTIO_AUX_ROLE
// bridge, embedded NATS) as istio-aux-bridge and expects /readyz to answer
// 200, which needs its pod and namespace informers synced: list and watch
// granted by 202-rbac-bridge.yaml and nothing more.
func TestBridgeRunsWithItsRole(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, _ := startWithConfig(ctx, t, cluster.Options{})
	ports, err := cluster.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(ports[0])
	log, start := runAs(ctx, t, c, "istio-aux-bridge", "./bridge/cmd/bridge",
		"ISTIO_AUX_ROLE=bridge", "NATS_URL=", "ISTIO_AUX_DATA_DIR="+t.TempDir(), "METRICS_ADDR="+addr,
		// It reads and watches config-logging and config-istio-aux there
		// (204-rbac-logging.yaml).
		"SYSTEM_NAMESPACE=istio-aux")
	err = poll.Until(ctx, 60*time.Second, func(ctx context.Context) (bool, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("the bridge never became ready: %v", err)
	}
	t.Logf("bridge ready %v after start", time.Since(start).Round(time.Millisecond))
	if strings.Contains(strings.ToLower(log.String()), "forbidden") {
		t.Errorf("the bridge was refused something by RBAC:\n%s", grepLines(log.String(), "forbidden"))
	}
	if strings.Contains(log.String(), "config-logging is unreadable") {
		t.Errorf("the bridge could not read config-logging:\n%s", grepLines(log.String(), "config-logging"))
	}

	// It follows config-istio-aux with that role alone: a value it cannot
	// use is said on the ConfigMap, and a new nats-url makes it start again
	// (NATS_URL is set, as config/ sets it from that key).
	setKeys := func(data map[string]string) {
		t.Helper()
		cms := c.Client().CoreV1().ConfigMaps("istio-aux")
		cm, err := cms.Get(ctx, settings.ConfigMapName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		maps.Copy(cm.Data, data)
		if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setKeys(map[string]string{settings.KeyQuitNative: "yes please"})
	err = poll.Until(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		evs, err := c.Client().CoreV1().Events("istio-aux").List(ctx, metav1.ListOptions{FieldSelector: "reason=" + settings.ReasonRejected})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == settings.ConfigMapName && e.Source.Component == "istio-aux-bridge" && strings.Contains(e.Message, settings.KeyQuitNative) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("no %s Event from the bridge on %s: %v\n%s", settings.ReasonRejected, settings.ConfigMapName, err, grepLines(log.String(), "setting"))
	}
	setKeys(map[string]string{settings.KeyNATSURL: "nats://elsewhere.example:4222"})
	err = poll.Until(ctx, 30*time.Second, func(context.Context) (bool, error) {
		return strings.Contains(log.String(), "Stopping to start again"), nil
	})
	if err != nil {
		t.Errorf("the bridge did not stop for a new nats-url: %v\n%s", err, grepLines(log.String(), "nats"))
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
	kubeconfig := serviceAccountKubeconfig(ctx, t, c, serviceAccount)
	log := &syncBuffer{}
	cmd := exec.Command(bin)
	cmd.Env = append(append(os.Environ(), "KUBECONFIG="+kubeconfig), env...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Killed, not interrupted: graceful shutdown (knative's webhook
		// drains for 45s) is not what these tests exercise.
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
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

// startWithConfig starts a control plane (opts, logging to a file kept on
// failure) and installs, for real, config/'s documents that need no Knative
// CRD (with ko:// placeholders).
func startWithConfig(ctx context.Context, t *testing.T, opts cluster.Options) (*cluster.Cluster, *applier) {
	t.Helper()
	opts.Log = testLog(t)
	c, err := cluster.Start(ctx, opts)
	if err != nil {
		t.Fatalf("starting the control plane: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stopping the control plane: %v", err)
		}
	})
	a := newApplier(t, c)
	for _, d := range loadDocs(t, "config", placeholder) {
		if strings.Contains(d.obj.GetAPIVersion(), "knative.dev") {
			continue
		}
		if err := a.apply(ctx, d, false); err != nil {
			t.Fatalf("applying %s: %v", d, err)
		}
	}
	return c, a
}

// serviceAccountKubeconfig writes a kubeconfig that authenticates as the
// ServiceAccount with a short-lived TokenRequest token.
func serviceAccountKubeconfig(ctx context.Context, t *testing.T, c *cluster.Cluster, name string) string {
	t.Helper()
	tr, err := c.Client().CoreV1().ServiceAccounts("istio-aux").CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s: %v", name, err)
	}
	rc := c.RESTConfig()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: rc.Host, CertificateAuthority: rc.CAFile, CertificateAuthorityData: rc.CAData, InsecureSkipTLSVerify: rc.Insecure}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.CurrentContext = "c"
	path := filepath.Join(t.TempDir(), name+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	// The token must work before the binary relies on it.
	rcs, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kubernetes.NewForConfigOrDie(rcs).Discovery().ServerVersion(); err != nil {
		t.Fatalf("%s's kubeconfig does not work: %v", name, err)
	}
	return path
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(strings.ToLower(l), substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
