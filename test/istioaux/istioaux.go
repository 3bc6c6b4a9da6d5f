// Package istioaux runs istio-aux's own binaries (webhook, bridge with
// embedded NATS and the in-process function) as processes next to a
// test/cluster control plane, wired the way a real install is, except that
// the API server reaches the webhook by URL on 127.0.0.1. Used by the e2e
// tests and the local demo.
package istioaux

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/istio-aux/istio-aux/pkg/names"
	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/webhook/admission"
)

// SystemNamespace is where istio-aux's ConfigMap and Secret live.
const SystemNamespace = "istio-aux"

// IstioAux is istio-aux running as real processes.
type IstioAux struct {
	env     *cluster.Cluster
	log     io.Writer
	webhook *cluster.Process
	// webhookBin and webhookEnv start the webhook again as it was (StartWebhook).
	webhookBin string
	webhookEnv []string
	bridge     *cluster.Process
	dataDir    string
	// The deployed shape's own processes (StartBridgeAs(Deployed)).
	nats, function       *cluster.Process
	natsURL, functionURL string
	// BridgeEnv is added to the bridge's environment at its next start
	// (a setting such as ISTIO_AUX_QUIT_NATIVE=true).
	BridgeEnv []string
	// metricsURL is the bridge's /metrics.
	metricsURL string
}

// BinDir is where hack/e2e.sh and hack/run.sh put istio-aux's binaries;
// missing ones are built there on first use.
func BinDir() string { return filepath.Join(cluster.CacheDir(), "bin") }

// Build builds the Go package pkg as BinDir()/name, unless it is there
// already (E2E_REBUILD=1 builds it again).
func Build(pkg, name string) (string, error) {
	out := filepath.Join(BinDir(), name)
	if _, err := os.Stat(out); err == nil && os.Getenv("E2E_REBUILD") == "" {
		return out, nil
	}
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = cluster.RepoRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w: %s", pkg, err, b)
	}
	return out, nil
}

// MustBuild is Build's, or t fails.
func MustBuild(t testing.TB, pkg, name string) string {
	t.Helper()
	bin, err := Build(pkg, name)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// Stop stops the bridge (and the function and nats-server of the deployed
// shape), then the webhook.
func (a *IstioAux) Stop() error {
	var errs []error
	for _, p := range []*cluster.Process{a.bridge, a.function, a.nats, a.webhook} {
		if p != nil {
			errs = append(errs, p.Stop())
		}
	}
	return errors.Join(errs...)
}

// BridgeMetricsURL is the running bridge's /metrics (with the all-in-one
// shape, the dispatcher's and the function's metrics too).
func (a *IstioAux) BridgeMetricsURL() string { return a.metricsURL }

// Pids are the process ids of the webhook and the bridge (0 when not
// running), for test/bench's memory readings.
func (a *IstioAux) Pids() (webhook, bridge int) { return pidOf(a.webhook), pidOf(a.bridge) }

// PeerPids are the process ids of the deployed shape's nats-server and
// proxy-quit function (0 when not running).
func (a *IstioAux) PeerPids() (nats, function int) { return pidOf(a.nats), pidOf(a.function) }

func pidOf(p *cluster.Process) int {
	if p == nil {
		return 0
	}
	return p.Pid()
}

// StopBridge stops the bridge only (tests of catching up after downtime).
func (a *IstioAux) StopBridge() error { return a.bridge.Stop() }

// Start installs istio-aux's ConfigMap, webhook Secret and
// MutatingWebhookConfiguration in c, starts the webhook, waits until it
// mutates pods, then starts the bridge and waits until it is ready.
func Start(ctx context.Context, c *cluster.Cluster, log io.Writer) (*IstioAux, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	a := &IstioAux{env: c, log: log, dataDir: filepath.Join(c.Dir(), "bridge-data")}
	cs := c.Client()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: SystemNamespace}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	if _, err := cs.CoreV1().ConfigMaps(SystemNamespace).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "config-istio-aux"},
		Data:       map[string]string{"mode": "hold"},
	}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	// Logging, metrics and leader election settings, as config/ ships them.
	for _, file := range []string{"300-config-logging.yaml", "300-config-observability.yaml", "300-config-leader-election.yaml"} {
		raw, err := os.ReadFile(filepath.Join(cluster.RepoRoot(), "config", file))
		if err != nil {
			return nil, err
		}
		var cm corev1.ConfigMap
		if err := yaml.UnmarshalStrict(raw, &cm); err != nil {
			return nil, fmt.Errorf("config/%s: %w", file, err)
		}
		cm.Namespace = SystemNamespace
		if _, err := cs.CoreV1().ConfigMaps(SystemNamespace).Create(ctx, &cm, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
	}
	// knative's certificate has DNS SANs only, and the API server reaches
	// the webhook by URL on 127.0.0.1: pre-create a certificate valid for
	// both, which knative's certificate reconciler keeps.
	svc := "istio-aux-webhook"
	cert, key, err := c.CA().Serving(svc, svc+"."+SystemNamespace, svc+"."+SystemNamespace+".svc", svc+"."+SystemNamespace+".svc.cluster.local")
	if err != nil {
		return nil, err
	}
	if _, err := cs.CoreV1().Secrets(SystemNamespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: names.WebhookSecret},
		Data:       map[string][]byte{"server-key.pem": key, "server-cert.pem": cert, "ca-cert.pem": c.CA().CertPEM},
	}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	ports, err := cluster.FreePorts(3)
	if err != nil {
		return nil, err
	}
	port, profiling, metrics := ports[0], ports[1], ports[2]
	url := "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) + admission.Path
	if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: names.WebhookConfiguration},
		Webhooks:   admission.Webhooks(SystemNamespace, admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: c.CA().CertPEM}),
	}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	wbin, err := Build("./webhook/cmd/webhook", "webhook")
	if err != nil {
		return nil, err
	}
	a.webhookBin, a.webhookEnv = wbin, []string{
		"KUBECONFIG=" + c.Kubeconfig(),
		"SYSTEM_NAMESPACE=" + SystemNamespace,
		"WEBHOOK_NAME=istio-aux-webhook",
		"WEBHOOK_PORT=" + strconv.Itoa(port),
		"WEBHOOK_SECRET_NAME=" + names.WebhookSecret,
		"PROFILING_PORT=" + strconv.Itoa(profiling),
		"METRICS_PROMETHEUS_PORT=" + strconv.Itoa(metrics),
		"ISTIO_AUX_DISABLE_HEALTH_PROBES=true",
	}
	if err := a.StartWebhook(ctx); err != nil {
		return a, err
	}
	return a, a.StartBridge()
}

// StartWebhook (re)starts the webhook, as Start first started it, and waits
// until it mutates pods.
func (a *IstioAux) StartWebhook(ctx context.Context) error {
	var err error
	a.webhook, err = cluster.StartProcess("webhook", a.log, a.webhookEnv, a.webhookBin, "--disable-ha")
	if err != nil {
		return err
	}
	// Ready once a dry-run pod in an opted-in namespace comes back mutated.
	err = a.webhook.WaitUp(ctx, 90*time.Second, func(ctx context.Context) error {
		return DryRunMutated(ctx, a.env.Client(), ProbePod("default"), HasHold)
	})
	if err != nil {
		return fmt.Errorf("webhook never mutated a pod: %w", err)
	}
	return nil
}

// StartBridge (re)starts the bridge in the AllInOne shape and waits until
// it is ready.
func (a *IstioAux) StartBridge() error { return a.StartBridgeAs(AllInOne) }

// StartBridgeAs (re)starts the bridge in the given shape and waits until it
// is ready. The deployed shape's nats-server and function are started on
// first use and kept across bridge restarts.
func (a *IstioAux) StartBridgeAs(shape Shape) error {
	// The deployed shape runs the bridge binary config/ deploys; the
	// all-in-one shape the command with the function linked in.
	pkg, name := "./cmd/allinone", "allinone"
	if shape == Deployed {
		pkg, name = "./bridge/cmd/bridge", "bridge"
	}
	bbin, err := Build(pkg, name)
	if err != nil {
		return err
	}
	metrics, err := cluster.FreePort()
	if err != nil {
		return err
	}
	vars := []string{
		"KUBECONFIG=" + a.env.Kubeconfig(),
		"ISTIO_AUX_DATA_DIR=" + a.dataDir,
		"METRICS_ADDR=127.0.0.1:" + strconv.Itoa(metrics),
		"POD_NAMESPACE=" + SystemNamespace,
		"SYSTEM_NAMESPACE=" + SystemNamespace,
	}
	vars = append(vars, a.BridgeEnv...)
	a.metricsURL = "http://127.0.0.1:" + strconv.Itoa(metrics) + "/metrics"
	if shape == Deployed {
		if err := a.startDeployedPeers(); err != nil {
			return err
		}
		token, err := CallerToken(context.Background(), a.env.Client(), a.env.Dir())
		if err != nil {
			return err
		}
		vars = append(vars, "ISTIO_AUX_ROLE=all", "NATS_URL="+a.natsURL, "K_SINK="+a.functionURL,
			"ISTIO_AUX_SINK_TOKEN_FILE="+token)
	}
	a.bridge, err = cluster.StartProcess("bridge", a.log, vars, bbin)
	if err != nil {
		return err
	}
	readyz := "http://127.0.0.1:" + strconv.Itoa(metrics) + "/readyz"
	// Ready once every opted-in namespace's pods are listed: seconds here,
	// longer with a thousand namespaces on a busy API server (the namespaces
	// bench), so the deadline is a bound on a broken start, not a target.
	return a.bridge.WaitUp(context.Background(), 3*time.Minute, func(ctx context.Context) error {
		return cluster.GetOK(ctx, readyz)
	})
}
