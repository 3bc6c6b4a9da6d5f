package check

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	certresources "knative.dev/pkg/webhook/certificates/resources"

	"github.com/istio-aux/istio-aux/kubectl/install"
	"github.com/istio-aux/istio-aux/pkg/names"
	"github.com/istio-aux/istio-aux/webhook/admission"
)

// renewedBy is how long before its expiry knative's certificates
// controller replaces the webhook's certificate (a day), less its resync
// period's worth of slack: a certificate closer to its end than this was
// not renewed when it should have been.
const renewedBy = 12 * time.Hour

// webhook checks the webhook's configuration against its Secret, the
// Secret's certificate, and the endpoints the API server calls.
func (r *run) webhook() []Item {
	secret, err := r.Client.CoreV1().Secrets(r.SystemNamespace).Get(r.ctx, names.WebhookSecret, metav1.GetOptions{})
	if err != nil {
		secret = nil
	}
	// The configuration first: its failure policies say what the other
	// two items' faults do to pods.
	cfg := r.webhookConfiguration(secret, err)
	return []Item{cfg, r.certificate(secret, err), r.endpoints()}
}

// unanswered is what the API server does with an opted-in pod when its
// call to the webhook fails: refuse it (failurePolicy Fail, as installed,
// and as assumed when the configuration cannot be read), or admit it
// without the hold where a webhook is set to Ignore; "" when there is no
// configuration, and so no call.
func (r *run) unanswered() string {
	switch {
	case r.noConfiguration:
		return ""
	case len(r.ignoring) == 0:
		return "refuses opted-in pods (failurePolicy Fail), which their controllers create again once a call succeeds"
	case r.failing:
		return fmt.Sprintf("refuses opted-in pods (failurePolicy Fail), but admits without the hold those that %s sees (failurePolicy Ignore)",
			webhookNames(r.ignoring))
	}
	return "admits opted-in pods without the hold (failurePolicy Ignore)"
}

// webhookNames is "webhook a" or "webhooks a, b".
func webhookNames(names []string) string {
	return plural(len(names), "webhook") + " " + strings.Join(names, ", ")
}

func (r *run) webhookConfiguration(secret *corev1.Secret, secretErr error) Item {
	show := "kubectl get mutatingwebhookconfiguration " + names.WebhookConfiguration + " -o yaml"
	mwc, err := r.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(r.ctx, names.WebhookConfiguration, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		r.noConfiguration = true
		return fail(ItemWebhookConfiguration, "MutatingWebhookConfiguration "+names.WebhookConfiguration+" is missing: no pod gets the hold", show)
	case err != nil:
		return fail(ItemWebhookConfiguration, err.Error(), show)
	}
	for _, w := range mwc.Webhooks {
		if install.FailsOpen(w) {
			r.ignoring = append(r.ignoring, w.Name)
		} else {
			r.failing = true
		}
	}
	if secretErr != nil {
		return fail(ItemWebhookConfiguration, fmt.Sprintf("cannot compare its caBundle with Secret %s/%s: %v", r.SystemNamespace, names.WebhookSecret, secretErr), show)
	}
	ca := secret.Data[certresources.CACert]
	var problems []string
	for _, want := range admission.Webhooks(r.SystemNamespace, admissionregistrationv1.WebhookClientConfig{}) {
		found := false
		for _, w := range mwc.Webhooks {
			if w.Name != want.Name {
				continue
			}
			found = true
			if len(ca) == 0 || !bytes.Equal(w.ClientConfig.CABundle, ca) {
				problems = append(problems, fmt.Sprintf("webhook %s's caBundle is not the %s of Secret %s/%s", w.Name, certresources.CACert, r.SystemNamespace, names.WebhookSecret))
			}
		}
		if !found {
			problems = append(problems, "webhook "+want.Name+" is missing")
		}
	}
	if len(r.ignoring) > 0 {
		// Not as installed: while the webhook fails, opted-in pods start
		// before their proxy. The reconciler writes Fail back whenever it
		// runs, so Ignore that stays is a webhook down or another writer.
		verb := "has"
		if len(r.ignoring) > 1 {
			verb = "have"
		}
		ignored := fmt.Sprintf("%s %s failurePolicy Ignore, not Fail", webhookNames(r.ignoring), verb)
		if len(problems) == 0 {
			return warn(ItemWebhookConfiguration, ignored+": when a call fails, the API server admits opted-in pods without the hold. "+
				"The webhook's reconciler writes Fail whenever it runs: is it running, or does something else write the configuration?", show)
		}
		problems = append(problems, ignored)
	}
	if len(problems) > 0 {
		return fail(ItemWebhookConfiguration, strings.Join(problems, "; ")+": the webhook's reconciler keeps them current (is the webhook running?)", show)
	}
	return ok(ItemWebhookConfiguration, fmt.Sprintf("%s: %d webhooks, caBundle matches Secret %s/%s, failurePolicy Fail",
		names.WebhookConfiguration, len(mwc.Webhooks), r.SystemNamespace, names.WebhookSecret))
}

func (r *run) certificate(secret *corev1.Secret, err error) Item {
	show := fmt.Sprintf("kubectl -n %s get secret %s -o jsonpath='{.data.%s}' | base64 -d | openssl x509 -noout -dates -subject",
		r.SystemNamespace, names.WebhookSecret, strings.ReplaceAll(certresources.ServerCert, ".", `\.`))
	if err != nil {
		return fail(ItemWebhookCertificate, fmt.Sprintf("reading Secret %s/%s: %v", r.SystemNamespace, names.WebhookSecret, err), show)
	}
	cert, err := servingCert(secret)
	if err != nil {
		return fail(ItemWebhookCertificate, err.Error(), show)
	}
	left := cert.NotAfter.Sub(r.Now())
	if left <= 0 {
		msg := fmt.Sprintf("expired at %s: the API server cannot call the webhook", cert.NotAfter.UTC().Format(time.RFC3339))
		if u := r.unanswered(); u != "" {
			msg += ", and " + u
		}
		return fail(ItemWebhookCertificate, msg, show)
	}
	if err := verify(secret, cert); err != nil {
		return fail(ItemWebhookCertificate, err.Error(), show)
	}
	if left < renewedBy {
		return warn(ItemWebhookCertificate, fmt.Sprintf("expires in %s (%s) and was not renewed a day before, as the webhook does: is it running?",
			left.Round(time.Minute), cert.NotAfter.UTC().Format(time.RFC3339)), show)
	}
	return ok(ItemWebhookCertificate, fmt.Sprintf("valid until %s (%s left), issued for %s", cert.NotAfter.UTC().Format(time.RFC3339),
		left.Round(time.Hour), serviceHost(names.WebhookService, r.SystemNamespace)))
}

// servingCert is the Secret's serving certificate.
func servingCert(secret *corev1.Secret) (*x509.Certificate, error) {
	name := secret.Namespace + "/" + secret.Name
	block, _ := pem.Decode(secret.Data[certresources.ServerCert])
	if block == nil {
		return nil, fmt.Errorf("Secret %s holds no certificate in %s: the webhook has not issued one yet (is it running?)", name, certresources.ServerCert)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("Secret %s: %s: %w", name, certresources.ServerCert, err)
	}
	return cert, nil
}

// verify checks the serving certificate against the Secret's CA for the
// host the API server calls, at the certificate's own start: its expiry is
// judged apart, in words.
func verify(secret *corev1.Secret, cert *x509.Certificate) error {
	name := secret.Namespace + "/" + secret.Name
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(secret.Data[certresources.CACert]) {
		return fmt.Errorf("Secret %s holds no CA in %s", name, certresources.CACert)
	}
	host := serviceHost(names.WebhookService, secret.Namespace)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: host, CurrentTime: cert.NotBefore}); err != nil {
		return fmt.Errorf("Secret %s: the certificate does not verify for %s against its CA: %w", name, host, err)
	}
	return nil
}

func serviceHost(service, namespace string) string { return service + "." + namespace + ".svc" }

// endpoints checks that the API server has somewhere to send reviews.
func (r *run) endpoints() Item {
	show := r.kubectl(fmt.Sprintf("get endpointslices -l %s=%s -o wide", discoveryv1.LabelServiceName, names.WebhookService))
	e, err := install.WebhookEndpoints(r.ctx, r.Client, r.SystemNamespace)
	if err != nil {
		return fail(ItemWebhookEndpoints, err.Error(), show)
	}
	want := e.Total
	if d, err := r.deployment(names.WebhookDeployment); err == nil && d != nil && d.Spec.Replicas != nil {
		want = max(want, int(*d.Spec.Replicas))
	}
	switch {
	case e.Ready == 0:
		msg := fmt.Sprintf("Service %s/%s has no ready endpoint", r.SystemNamespace, names.WebhookService)
		if u := r.unanswered(); u != "" {
			msg += ": the API server " + u
		}
		return fail(ItemWebhookEndpoints, msg, show)
	case e.Ready < want:
		return warn(ItemWebhookEndpoints, fmt.Sprintf("%d of %d endpoints ready", e.Ready, want), show)
	}
	return ok(ItemWebhookEndpoints, fmt.Sprintf("%d %s ready", e.Ready, plural(e.Ready, "endpoint")))
}
