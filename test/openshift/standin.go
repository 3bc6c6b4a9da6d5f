package openshift

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/istio-aux/istio-aux/test/cluster"
)

// ConfigurationName names the stand-in's webhook configurations. Mutating
// webhooks are called in the order of their configurations' names: it
// sorts before every other (istio-aux's, Istio's), as SCC admission runs
// before every webhook; validating webhooks run after every mutation.
const ConfigurationName = "0-openshift-scc-standin"

// Where the allocator starts and how big a namespace's block is: OpenShift's
// defaults (1000000000-1999999999/10000).
const (
	firstUID  = 1_000_000_000
	blockSize = 10_000
)

// Exempt are the namespaces whose pods run under SCCs of their own
// (OpenShift grants its platform's ServiceAccounts the privileged SCC): the
// cluster's own, Istio's (its CNI agent is privileged) and Knative's. Their
// namespaces get no ranges and their pods are not judged.
var Exempt = []string{"kube-system", "kube-public", "kube-node-lease", "default", "istio-system", "knative-serving", "traefik-system"}

// Standin serves the allocator and SCC admission as webhooks of the
// cluster's API server, from the harness's process.
type Standin struct {
	client kubernetes.Interface
	srv    *http.Server
	log    io.Writer

	mu   sync.Mutex
	next int64 // the next block's first UID
}

// Start serves the stand-in on 127.0.0.1 and registers its webhooks; the
// namespaces that exist get no ranges (create the ones to judge after).
func Start(ctx context.Context, c *cluster.Cluster, log io.Writer) (_ *Standin, err error) {
	s := &Standin{client: c.Client(), log: log, next: firstUID}
	nss, err := s.client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, ns := range nss.Items {
		if b, err := ParseBlock(ns.Annotations[AnnotationUIDRange]); err == nil && b.End+1 > s.next {
			s.next = b.End + 1
		}
	}
	certPEM, keyPEM, err := c.CA().Serving()
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/namespace", review(s.allocate))
	mux.Handle("/admit", review(s.admit))
	mux.Handle("/validate", review(s.validate))
	mux.Handle("/exec", review(s.exec))
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
	go func() { _ = s.srv.ServeTLS(ln, "", "") }()
	defer func() {
		if err != nil {
			_ = s.Stop()
		}
	}()
	url := "https://" + ln.Addr().String()
	return s, s.register(ctx, url, c.CA().CertPEM)
}

// Stop unregisters the webhooks and stops serving.
func (s *Standin) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	errs := []error{
		ignoreNotFound(s.client.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, ConfigurationName, metav1.DeleteOptions{})),
		ignoreNotFound(s.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, ConfigurationName, metav1.DeleteOptions{})),
		s.srv.Shutdown(ctx),
	}
	return errors.Join(errs...)
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// register creates the webhook configurations: the allocator on namespace
// CREATE, Admit on pod CREATE; Validate on pod CREATE and the exec check on
// CONNECT of pods/exec and pods/attach. Every one fails closed, as an
// admission plugin does.
func (s *Standin) register(ctx context.Context, url string, ca []byte) error {
	rule := func(op admissionregistrationv1.OperationType, resources ...string) []admissionregistrationv1.RuleWithOperations {
		return []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{op},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: resources},
		}}
	}
	judged := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: Exempt}}}
	client := func(path string) admissionregistrationv1.WebhookClientConfig {
		return admissionregistrationv1.WebhookClientConfig{URL: ptr.To(url + path), CABundle: ca}
	}
	common := func(name, path string, rules []admissionregistrationv1.RuleWithOperations, nsSel *metav1.LabelSelector) (string, admissionregistrationv1.WebhookClientConfig, []admissionregistrationv1.RuleWithOperations, *metav1.LabelSelector) {
		return name, client(path), rules, nsSel
	}
	mutating := func(name, path string, rules []admissionregistrationv1.RuleWithOperations, nsSel *metav1.LabelSelector) admissionregistrationv1.MutatingWebhook {
		n, cc, r, sel := common(name, path, rules, nsSel)
		return admissionregistrationv1.MutatingWebhook{Name: n, ClientConfig: cc, Rules: r, NamespaceSelector: sel,
			FailurePolicy: ptr.To(admissionregistrationv1.Fail), SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"}, TimeoutSeconds: ptr.To(int32(10))}
	}
	validating := func(name, path string, rules []admissionregistrationv1.RuleWithOperations) admissionregistrationv1.ValidatingWebhook {
		n, cc, r, sel := common(name, path, rules, judged)
		return admissionregistrationv1.ValidatingWebhook{Name: n, ClientConfig: cc, Rules: r, NamespaceSelector: sel,
			FailurePolicy: ptr.To(admissionregistrationv1.Fail), SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"}, TimeoutSeconds: ptr.To(int32(10))}
	}
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: ConfigurationName},
		Webhooks: []admissionregistrationv1.MutatingWebhook{
			mutating("namespaces.scc.openshift.standin", "/namespace", rule(admissionregistrationv1.Create, "namespaces"), nil),
			mutating("pods.scc.openshift.standin", "/admit", rule(admissionregistrationv1.Create, "pods"), judged),
		},
	}
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: ConfigurationName},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{
			validating("pods.scc.openshift.standin", "/validate", rule(admissionregistrationv1.Create, "pods")),
			validating("exec.scc.openshift.standin", "/exec", rule(admissionregistrationv1.Connect, "pods/exec", "pods/attach")),
		},
	}
	if _, err := s.client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mwc, metav1.CreateOptions{}); err != nil {
		return err
	}
	_, err := s.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{})
	return err
}

// allocate gives a new namespace its ranges, as OpenShift's namespace
// allocator does (there, a moment after; here, as it is created).
func (s *Standin) allocate(_ context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
	var ns corev1.Namespace
	if err := json.Unmarshal(req.Object.Raw, &ns); err != nil {
		return nil, err
	}
	if slices.Contains(Exempt, ns.Name) || ns.Annotations[AnnotationUIDRange] != "" {
		return allowed(), nil
	}
	s.mu.Lock()
	start := s.next
	s.next += blockSize
	s.mu.Unlock()
	n := (start - firstUID) / blockSize
	out := ns.DeepCopy()
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	block := fmt.Sprintf("%d/%d", start, blockSize)
	out.Annotations[AnnotationUIDRange] = block
	out.Annotations[AnnotationSupplementalGroup] = block
	out.Annotations[AnnotationMCS] = fmt.Sprintf("s0:c%d,c%d", n/1000+1, n%1000+1)
	return patched(&ns, out)
}

// admit is SCC admission's mutating half: restricted-v2 where the pod can
// run under it (its defaults set), else privileged where the creator or the
// pod's ServiceAccount may use it (the pod as it is), else a refusal.
func (s *Standin) admit(ctx context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		return nil, err
	}
	r, err := s.ranges(ctx, req.Namespace)
	if err != nil {
		return denied(err.Error()), nil
	}
	out := pod.DeepCopy()
	Admit(out, r)
	scc := RestrictedV2
	errs := Validate(out, r)
	if len(errs) > 0 {
		ok, err := s.mayUsePrivileged(ctx, req.UserInfo, req.Namespace, pod.Spec.ServiceAccountName)
		if err != nil {
			return nil, err
		}
		if !ok {
			return denied(fmt.Sprintf("unable to validate against any security context constraint: [%s: %s]", RestrictedV2, strings.Join(errs, "; "))), nil
		}
		out, scc = pod.DeepCopy(), Privileged
	}
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	out.Annotations[AnnotationSCC] = scc
	return patched(&pod, out)
}

// validate is SCC admission's validating half, after every webhook: a pod
// admitted under restricted-v2 must still fit it, whatever the webhooks
// added; one admitted as privileged needs its right still.
func (s *Standin) validate(ctx context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		return nil, err
	}
	return s.judge(ctx, &pod, req.UserInfo, "")
}

// exec is SCCExecRestrictions: exec and attach are allowed only to callers
// who could create the pod as it is under an SCC they (or the pod's
// ServiceAccount) may use.
func (s *Standin) exec(ctx context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
	pod, err := s.client.CoreV1().Pods(req.Namespace).Get(ctx, req.Name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return s.judge(ctx, pod, req.UserInfo, fmt.Sprintf("%s operation is not allowed because the pod's security context exceeds your permissions: ", req.SubResource))
}

func (s *Standin) judge(ctx context.Context, pod *corev1.Pod, user authenticationv1.UserInfo, prefix string) (*admissionv1.AdmissionResponse, error) {
	r, err := s.ranges(ctx, pod.Namespace)
	if err != nil {
		return denied(prefix + err.Error()), nil
	}
	errs := Validate(pod, r)
	if len(errs) == 0 {
		return allowed(), nil
	}
	ok, err := s.mayUsePrivileged(ctx, user, pod.Namespace, pod.Spec.ServiceAccountName)
	if err != nil {
		return nil, err
	}
	if ok {
		return allowed(), nil
	}
	return denied(fmt.Sprintf("%spod %s: %s: %s", prefix, pod.Name, RestrictedV2, strings.Join(errs, "; "))), nil
}

func (s *Standin) ranges(ctx context.Context, namespace string) (Ranges, error) {
	ns, err := s.client.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
	if err != nil {
		return Ranges{}, err
	}
	return RangesOf(ns)
}

// mayUsePrivileged asks the API server's authorizer whether the user, or
// the pod's ServiceAccount, may use the privileged SCC (verb use on
// securitycontextconstraints.security.openshift.io/privileged).
func (s *Standin) mayUsePrivileged(ctx context.Context, user authenticationv1.UserInfo, namespace, sa string) (bool, error) {
	if sa == "" {
		sa = "default"
	}
	subjects := []authorizationv1.SubjectAccessReviewSpec{
		{User: user.Username, Groups: user.Groups, UID: user.UID},
		{User: "system:serviceaccount:" + namespace + ":" + sa, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}},
	}
	for _, spec := range subjects {
		spec.ResourceAttributes = &authorizationv1.ResourceAttributes{Namespace: namespace, Verb: "use",
			Group: "security.openshift.io", Resource: "securitycontextconstraints", Name: Privileged}
		sar, err := s.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		if sar.Status.Allowed {
			return true, nil
		}
	}
	return false, nil
}

// review serves one kind of AdmissionReview.
func review(handle func(context.Context, *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Request == nil {
			http.Error(w, fmt.Sprintf("not an AdmissionReview: %v", err), http.StatusBadRequest)
			return
		}
		resp, err := handle(r.Context(), in.Request)
		if err != nil {
			resp = &admissionv1.AdmissionResponse{Result: &metav1.Status{Code: http.StatusInternalServerError, Message: err.Error()}}
		}
		resp.UID = in.Request.UID
		out := admissionv1.AdmissionReview{TypeMeta: in.TypeMeta, Response: resp}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
}

func allowed() *admissionv1.AdmissionResponse { return &admissionv1.AdmissionResponse{Allowed: true} }

func denied(msg string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Result: &metav1.Status{Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden, Message: msg}}
}

// patched allows the object with the JSON patch from in to out.
func patched(in, out any) (*admissionv1.AdmissionResponse, error) {
	a, err := json.Marshal(in)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, err
	}
	ops, err := jsonpatch.CreatePatch(a, b)
	if err != nil {
		return nil, err
	}
	p, err := json.Marshal(ops)
	if err != nil {
		return nil, err
	}
	return &admissionv1.AdmissionResponse{Allowed: true, Patch: p, PatchType: ptr.To(admissionv1.PatchTypeJSONPatch)}, nil
}
