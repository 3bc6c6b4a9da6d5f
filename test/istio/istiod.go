package istio

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/images"
)

// ProxyImage is the proxy image injected pods get, built here
// (ProxyImageContents) and pulled by the real node from its registry.
const ProxyImage = images.Registry + "/proxyv2:dev"

// Options configure Start.
type Options struct {
	// NativeSidecars is istiod's ENABLE_NATIVE_SIDECARS: "false" (the
	// default here: classic sidecars, which the kwok Stages and the hold
	// annotation are about), "true" (every injected proxy is a native
	// sidecar), or "auto" (Istio's default: native when every node's
	// kubelet is 1.33 or newer, and when there are no nodes at all).
	NativeSidecars string
	// Release is the Istio release istiod runs, with its own chart (zero:
	// Main).
	Release Release
	// Values are merged over the chart's defaults and the harness's
	// overrides, like helm --set.
	Values map[string]any
	// Log receives istiod's output; nil discards it.
	Log io.Writer
}

// Istiod is istiod running outside the cluster as its sidecar injector.
type Istiod struct {
	client kubernetes.Interface
	proc   *cluster.Process
	dir    string
}

// Start renders the chart's ConfigMaps into istio-system, starts istiod
// against the cluster with every listener on 127.0.0.1, waits until it
// injects, and registers its webhook as the chart does. On error
// everything started is stopped.
func Start(ctx context.Context, c *cluster.Cluster, opts Options) (_ *Istiod, err error) {
	r := opts.Release
	if err := r.Built(); err != nil {
		return nil, err
	}
	native := opts.NativeSidecars
	if native == "" {
		native = "false"
	}
	if native != "false" && native != "true" && native != "auto" {
		return nil, fmt.Errorf("NativeSidecars %q: want false, true or auto", native)
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	chart, err := LoadChart(r.ChartDir())
	if err != nil {
		return nil, err
	}
	ports, err := cluster.FreePorts(6)
	if err != nil {
		return nil, err
	}
	httpsPort, httpPort, grpcPort, secureGRPCPort, monitoringPort, ctrlzPort := ports[0], ports[1], ports[2], ports[3], ports[4], ports[5]
	url := fmt.Sprintf("https://127.0.0.1:%d/inject", httpsPort)
	values := chart.Values(harnessValues(native), opts.Values, map[string]any{"istiodRemote": map[string]any{
		"injectionURL":      url,
		"injectionCABundle": base64.StdEncoding.EncodeToString(c.CA().CertPEM),
	}})
	if err := applyConfigMaps(ctx, c.Client(), chart, values); err != nil {
		return nil, err
	}
	mwc, err := webhookConfiguration(values)
	if err != nil {
		return nil, err
	}

	// Under the cluster's work dir: removed with it, and swept with it after
	// a crash.
	dir, err := os.MkdirTemp(c.Dir(), "istiod-")
	if err != nil {
		return nil, err
	}
	i := &Istiod{client: c.Client(), dir: dir}
	defer func() {
		if err != nil {
			_ = i.Stop()
		}
	}()
	cert, key, err := c.CA().Serving("istiod." + Namespace + ".svc")
	if err != nil {
		return nil, err
	}
	for name, data := range map[string][]byte{"tls.crt": cert, "tls.key": key, "ca.crt": c.CA().CertPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return nil, err
		}
	}
	addr := func(port int) string { return fmt.Sprintf("127.0.0.1:%d", port) }
	global := mapAt(values, "global")
	args := []string{"discovery",
		"--kubeconfig=" + c.Kubeconfig(),
		"--httpsAddr=" + addr(httpsPort), "--httpAddr=" + addr(httpPort),
		"--grpcAddr=" + addr(grpcPort), "--secureGRPCAddr=" + addr(secureGRPCPort),
		"--monitoringAddr=" + addr(monitoringPort),
		"--ctrlz_address=127.0.0.1", fmt.Sprintf("--ctrlz_port=%d", ctrlzPort),
		"--tlsCertFile=" + filepath.Join(dir, "tls.crt"), "--tlsKeyFile=" + filepath.Join(dir, "tls.key"),
		"--caCertFile=" + filepath.Join(dir, "ca.crt"),
		fmt.Sprintf("--log_output_level=%v", mapAt(global, "logging")["level"]),
		fmt.Sprintf("--domain=%v", mapAt(global, "proxy")["clusterDomain"]),
		fmt.Sprintf("--keepaliveMaxServerConnectionAge=%v", values["keepaliveMaxServerConnectionAge"]),
	}
	i.proc, err = cluster.StartProcess("istiod", opts.Log, istiodEnv(values, c.Kubeconfig()), filepath.Join(r.BinDir(), "pilot-discovery"), args...)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	roots.AddCert(c.CA().Cert)
	tlsClient := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
	defer tlsClient.CloseIdleConnections()
	if err := i.proc.WaitUp(ctx, 60*time.Second, func(ctx context.Context) error {
		if err := cluster.GetOK(ctx, fmt.Sprintf("http://%s/ready", addr(httpPort))); err != nil {
			return err
		}
		return injects(ctx, tlsClient, url)
	}); err != nil {
		return nil, err
	}

	mwcs := c.Client().AdmissionregistrationV1().MutatingWebhookConfigurations()
	_, err = mwcs.Create(ctx, mwc, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		var old *admissionregistrationv1.MutatingWebhookConfiguration
		if old, err = mwcs.Get(ctx, mwc.Name, metav1.GetOptions{}); err == nil {
			mwc.ResourceVersion = old.ResourceVersion
			_, err = mwcs.Update(ctx, mwc, metav1.UpdateOptions{})
		}
	}
	if err != nil {
		return nil, fmt.Errorf("registering istiod: %w", err)
	}
	return i, nil
}

// Stop unregisters the webhook (so that pods can be created without it
// again), stops istiod and removes its files. The ConfigMaps stay, as
// after helm's webhook is gone; a later Start replaces them.
func (i *Istiod) Stop() error {
	var errs []error
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := i.client.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, WebhookConfigurationName, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("unregistering istiod: %w", err))
	}
	if i.proc != nil {
		errs = append(errs, i.proc.Stop())
	}
	errs = append(errs, os.RemoveAll(i.dir))
	return errors.Join(errs...)
}

// harnessValues are the overrides every harness install gets (see the
// package doc for why).
func harnessValues(native string) map[string]any {
	return map[string]any{
		"global": map[string]any{
			"proxy":           map[string]any{"image": ProxyImage},
			"imagePullPolicy": string(corev1.PullIfNotPresent),
		},
		"meshConfig": map[string]any{"defaultConfig": map[string]any{"interceptionMode": "NONE"}},
		"env":        map[string]any{"ENABLE_NATIVE_SIDECARS": native},
	}
}

// istiodEnv is the environment the chart's Deployment gives istiod, with
// values.env, minus what only makes sense in a pod, plus what running
// outside the cluster needs: no cloud platform probing, and no patching of
// webhook configurations (Start registers the webhook with its CA bundle;
// the chart leaves that to istiod, which would write the same CA).
func istiodEnv(v map[string]any, kubeconfig string) []string {
	global := mapAt(v, "global")
	clusterID := mapAt(global, "multiCluster")["clusterName"]
	if clusterID == nil || clusterID == "" {
		clusterID = "Kubernetes"
	}
	env := []string{
		"POD_NAMESPACE=" + Namespace, "POD_NAME=istiod-harness", "SERVICE_ACCOUNT=istiod",
		"REVISION=default",
		fmt.Sprintf("PILOT_CERT_PROVIDER=%v", global["pilotCertProvider"]),
		fmt.Sprintf("CLUSTER_ID=%v", clusterID),
		fmt.Sprintf("PILOT_ENABLE_ANALYSIS=%v", mapAt(global, "istiod")["enableAnalysis"]),
		fmt.Sprintf("PILOT_TRACE_SAMPLING=%v", v["traceSampling"]),
		"CA_TRUSTED_NODE_ACCOUNTS=" + Namespace + "/ztunnel",
		"KUBECONFIG=" + kubeconfig,
		"CLOUD_PLATFORM=none",
		"INJECTION_WEBHOOK_CONFIG_NAME=", "VALIDATION_WEBHOOK_CONFIG_NAME=",
	}
	extra := mapAt(v, "env")
	for _, k := range slices.Sorted(maps.Keys(extra)) {
		env = append(env, fmt.Sprintf("%s=%v", k, extra[k]))
	}
	return env
}

// applyConfigMaps creates istio-system and writes the two ConfigMaps.
func applyConfigMaps(ctx context.Context, client kubernetes.Interface, chart *Chart, v map[string]any) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating %s: %w", Namespace, err)
	}
	mesh, err := chart.MeshConfigMap(v)
	if err != nil {
		return err
	}
	injector, err := chart.InjectorConfigMap(v)
	if err != nil {
		return err
	}
	cms := client.CoreV1().ConfigMaps(Namespace)
	for name, data := range map[string]map[string]string{"istio": mesh, "istio-sidecar-injector": injector} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace, Labels: chartLabels(nil)}, Data: data}
		_, err := cms.Create(ctx, cm, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		}
		if err != nil {
			return fmt.Errorf("writing ConfigMap %s: %w", name, err)
		}
	}
	return nil
}

// injects sends istiod one AdmissionReview for a plain pod and succeeds
// once it answers with a patch: TLS, templates and values are all loaded.
func injects(ctx context.Context, client *http.Client, url string) error {
	pod := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "istiod-ready-probe", Namespace: "default"},
		Spec:       corev1.PodSpec{ServiceAccountName: ServiceAccount, Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	raw, err := json.Marshal(pod)
	if err != nil {
		return err
	}
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: "istiod-ready-probe", Namespace: "default", Operation: admissionv1.Create,
			Kind:     metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Object:   runtime.RawExtension{Raw: raw},
		},
	}
	body, err := json.Marshal(review)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var out admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return fmt.Errorf("inject: %s: %w", resp.Status, err)
	}
	if out.Response == nil || len(out.Response.Patch) == 0 {
		return fmt.Errorf("inject: no patch yet (%s)", resp.Status)
	}
	return nil
}
