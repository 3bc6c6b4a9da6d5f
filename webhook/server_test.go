package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fakekube "knative.dev/pkg/client/injection/kube/client/fake"
	"knative.dev/pkg/configmap"
	"knative.dev/pkg/controller"
	rtesting "knative.dev/pkg/reconciler/testing"
	"knative.dev/pkg/system"
	knwebhook "knative.dev/pkg/webhook"
	certresources "knative.dev/pkg/webhook/certificates/resources"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/pkg/names"
	"github.com/istio-aux/istio-aux/webhook/admission"
)

// startServer runs NewController with a Server in its context, on a free
// port with the certificate of a Secret like the one knative's certificates
// controller fills, its informers started. It returns the server, its
// address, the CA to trust, and the function that ends the process's
// context.
func startServer(t *testing.T, port int) (*Server, string, *x509.CertPool, context.Context, context.CancelFunc) {
	t.Helper()
	srv := NewServer()
	ctx, cancel, informers := rtesting.SetupFakeContextWithCancel(t, func(ctx context.Context) context.Context {
		ctx = knwebhook.WithOptions(ctx, knwebhook.Options{
			ServiceName: names.WebhookService, SecretName: names.WebhookSecret, Port: port, GracePeriod: 100 * time.Millisecond,
		})
		return WithServer(ctx, srv)
	})
	// The server's goroutine logs through t: it must be done before t is.
	t.Cleanup(func() { cancel(); _ = srv.Wait() })
	key, cert, ca, err := certresources.CreateCerts(ctx, names.WebhookService, system.Namespace(), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	kc := fakekube.Get(ctx)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ml", Labels: map[string]string{keys.LabelEnabled: "true"}}}
	if _, err := kc.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: names.WebhookSecret, Namespace: system.Namespace()},
		Data: map[string][]byte{certresources.ServerKey: key, certresources.ServerCert: cert, certresources.CACert: ca}}
	if _, err := kc.CoreV1().Secrets(system.Namespace()).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	NewController(ctx, configmap.NewStaticWatcher(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: names.ConfigMap, Namespace: system.Namespace()}}))
	if err := controller.StartInformers(ctx.Done(), informers...); err != nil && ctx.Err() == nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	return srv, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), pool, ctx, cancel
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// The Server answers the API server over TLS with the certificate in the
// webhook's Secret, and on SIGTERM (its context ends) keeps answering until
// no request has come for the grace period, then stops.
func TestServerServesAndDrains(t *testing.T) {
	srv, addr, ca, _, cancel := startServer(t, freePort(t))
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: ca, ServerName: names.WebhookService + "." + system.Namespace() + ".svc",
	}}}
	body := reviewBody(t, podRequest(t, "ml", nil, nil))
	post := func() (*admissionv1.AdmissionResponse, error) {
		resp, err := client.Post("https://"+addr+admission.Path+"?timeout=5s", "application/json", bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		var rv admissionv1.AdmissionReview
		if err := json.NewDecoder(resp.Body).Decode(&rv); err != nil || rv.Response == nil {
			return nil, errors.Join(err, errors.New("no response in "+resp.Status))
		}
		return rv.Response, nil
	}
	// The listener is up at once; answers wait for the informers.
	var resp *admissionv1.AdmissionResponse
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if resp, err = post(); err == nil {
			break
		}
	}
	if err != nil || !resp.Allowed || resp.Patch == nil {
		t.Fatalf("answer %+v, %v; want the pod mutated", resp, err)
	}
	cancel()
	// Draining: still answering.
	if resp, err := post(); err != nil || resp.Patch == nil {
		t.Errorf("while draining: %+v, %v", resp, err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Wait = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not stop after draining")
	}
	if _, err := post(); err == nil {
		t.Error("answered after stopping")
	}
}

// A server that cannot listen ends the process's context, so the process
// stops rather than run without answering, and Wait says why.
func TestServerThatCannotListenStopsTheProcess(t *testing.T) {
	taken, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	srv, _, _, ctx, _ := startServer(t, taken.Addr().(*net.TCPAddr).Port)
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the context did not end")
	}
	if err := srv.Wait(); err == nil || !errors.Is(context.Cause(ctx), err) {
		t.Errorf("Wait = %v, cause %v; want the listen error for both", err, context.Cause(ctx))
	}
}
