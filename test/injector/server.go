package injector

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"crypto/tls"
)

// Serve starts the injector on 127.0.0.1 with a certificate for it
// (certPEM/keyPEM, signed by caPEM) and registers it in the cluster for
// namespaces labelled istio-injection=enabled. Stop unregisters and stops it.
func Serve(ctx context.Context, client kubernetes.Interface, caPEM, certPEM, keyPEM []byte) (stop func(), err error) {
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("injector certificate: %w", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{
		Handler:           http.HandlerFunc(handle),
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 5 * time.Second,
	}
	go func() { _ = srv.ServeTLS(l, "", "") }()
	url := fmt.Sprintf("https://%s/inject", l.Addr())
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: ConfigurationName},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "sidecar-injector.istio.io",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caPEM},
			Rules:                   []admissionregistrationv1.RuleWithOperations{podCreate()},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{NamespaceLabel: "enabled"}},
			ObjectSelector:          &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: AnnotationInject, Operator: metav1.LabelSelectorOpNotIn, Values: []string{"false"}}}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			ReinvocationPolicy:      ptr.To(admissionregistrationv1.NeverReinvocationPolicy),
			TimeoutSeconds:          ptr.To(int32(10)),
		}},
	}
	mwc := client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	if _, err := mwc.Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
		_ = srv.Close()
		return nil, fmt.Errorf("registering injector: %w", err)
	}
	return func() {
		dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := mwc.Delete(dctx, ConfigurationName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			_ = err // the cluster may already be gone; nothing to do
		}
		_ = srv.Close()
	}, nil
}

func podCreate() admissionregistrationv1.RuleWithOperations {
	return admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule: admissionregistrationv1.Rule{
			APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"},
		},
	}
}

func handle(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
		return
	}
	resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
	if patch, err := admit(review.Request); err != nil {
		resp.Warnings = []string{"test injector: " + err.Error()}
	} else if patch != nil {
		resp.Patch = patch
		resp.PatchType = ptr.To(admissionv1.PatchTypeJSONPatch)
	}
	review.Response = resp
	review.Request = nil
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(review)
}

func admit(req *admissionv1.AdmissionRequest) ([]byte, error) {
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		return nil, err
	}
	out, changed := Inject(&pod)
	if !changed {
		return nil, nil
	}
	type op struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}
	// "add" on an existing member replaces it (RFC 6902), so these are
	// right whether or not the pod had annotations or init containers.
	ops := []op{
		{"add", "/metadata/annotations", out.Annotations},
		{"add", "/spec/containers", out.Spec.Containers},
	}
	if len(out.Spec.InitContainers) > 0 {
		ops = append(ops, op{"add", "/spec/initContainers", out.Spec.InitContainers})
	}
	return json.Marshal(ops)
}

func intOrString(port int) intstr.IntOrString { return intstr.FromInt32(int32(port)) }
