//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/functions/decision"
	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/webhook"
)

const systemNamespace = "istio-aux"

// istioAux is istio-aux running as real processes next to the cluster.
type istioAux struct {
	webhookStop func() error
	bridgeStop  func() error
	dataDir     string
}

var (
	auxOnce sync.Once
	aux     *istioAux
	auxErr  error
)

// BinDir is where hack/e2e.sh puts istio-aux's binaries; tests build them
// there when run without the script.
func binDir() string { return filepath.Join(cluster.CacheDir(), "bin") }

func build(pkg, name string) (string, error) {
	out := filepath.Join(binDir(), name)
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

// withIstioAux starts the webhook and the bridge once for the whole run
// (tests before the first call run without istio-aux).
func withIstioAux(t *testing.T) *istioAux {
	t.Helper()
	auxOnce.Do(func() { aux, auxErr = startIstioAux() })
	if auxErr != nil {
		t.Fatalf("starting istio-aux: %v", auxErr)
	}
	return aux
}

func stopIstioAux() {
	if aux == nil {
		return
	}
	if aux.bridgeStop != nil {
		_ = aux.bridgeStop()
	}
	if aux.webhookStop != nil {
		_ = aux.webhookStop()
	}
}

func startIstioAux() (*istioAux, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := &istioAux{dataDir: filepath.Join(env.Dir(), "bridge-data")}
	cs := env.Client()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: systemNamespace}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	if _, err := cs.CoreV1().ConfigMaps(systemNamespace).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "config-istio-aux"},
		Data:       map[string]string{"mode": "hold"},
	}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	// knative's certificate has DNS SANs only, and the API server reaches
	// the webhook by URL on 127.0.0.1: pre-create a certificate valid for
	// both, which knative's certificate reconciler keeps.
	svc := "istio-aux-webhook"
	cert, key, err := env.CA().Serving(svc, svc+"."+systemNamespace, svc+"."+systemNamespace+".svc", svc+"."+systemNamespace+".svc.cluster.local")
	if err != nil {
		return nil, err
	}
	if _, err := cs.CoreV1().Secrets(systemNamespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: webhook.SecretName},
		Data:       map[string][]byte{"server-key.pem": key, "server-cert.pem": cert, "ca-cert.pem": env.CA().CertPEM},
	}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	port, err := cluster.FreePort()
	if err != nil {
		return nil, err
	}
	url := "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) + webhook.Path
	if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: webhook.ConfigurationName},
		Webhooks:   webhook.Webhooks(systemNamespace, admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: env.CA().CertPEM}),
	}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	wbin, err := build("./webhook/cmd/webhook", "webhook")
	if err != nil {
		return nil, err
	}
	profiling, err := cluster.FreePort()
	if err != nil {
		return nil, err
	}
	metrics, err := cluster.FreePort()
	if err != nil {
		return nil, err
	}
	a.webhookStop, err = cluster.StartProcess("webhook", logOut, []string{
		"KUBECONFIG=" + env.Kubeconfig(),
		"SYSTEM_NAMESPACE=" + systemNamespace,
		"WEBHOOK_NAME=istio-aux-webhook",
		"WEBHOOK_PORT=" + strconv.Itoa(port),
		"WEBHOOK_SECRET_NAME=" + webhook.SecretName,
		"PROFILING_PORT=" + strconv.Itoa(profiling),
		"METRICS_PROMETHEUS_PORT=" + strconv.Itoa(metrics),
		"ISTIO_AUX_DISABLE_HEALTH_PROBES=true",
	}, wbin, "--disable-ha")
	if err != nil {
		return nil, err
	}
	if err := a.startBridge(); err != nil {
		return a, err
	}
	// Ready once a dry-run pod in an opted-in namespace comes back mutated.
	probe := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: "default", Labels: map[string]string{decision.LabelEnabled: "true"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	err = cluster.Poll(ctx, 200*time.Millisecond, 90*time.Second, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods("default").Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, err
		}
		return p.Annotations["proxy.istio.io/config"] != "", nil
	})
	if err != nil {
		return a, fmt.Errorf("webhook never mutated a pod: %w", err)
	}
	return a, nil
}

func (a *istioAux) startBridge() error {
	bbin, err := build("./bridge/cmd/bridge", "bridge")
	if err != nil {
		return err
	}
	metrics, err := cluster.FreePort()
	if err != nil {
		return err
	}
	a.bridgeStop, err = cluster.StartProcess("bridge", logOut, []string{
		"KUBECONFIG=" + env.Kubeconfig(),
		"ISTIO_AUX_DATA_DIR=" + a.dataDir,
		"METRICS_ADDR=127.0.0.1:" + strconv.Itoa(metrics),
		"ISTIO_AUX_RESYNC=30s",
		"POD_NAMESPACE=" + systemNamespace,
		"SYSTEM_NAMESPACE=" + systemNamespace,
	}, bbin)
	if err != nil {
		return err
	}
	return cluster.Poll(context.Background(), 100*time.Millisecond, 30*time.Second, func(ctx context.Context) (bool, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+strconv.Itoa(metrics)+"/readyz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}
