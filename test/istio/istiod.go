package istio

import (
	"bytes"
	"cmp"
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
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/images"
)

// ProxyImage is the proxy image injected pods get from the harness's
// default release, built here (ProxyImageContents) and pulled by the real
// node from its registry; another release's is Release.ProxyImage.
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
	// Revision installs istiod as that revision (the chart's revision
	// value): namespaces then select it by istio.io/rev=REVISION or by a
	// tag of it (Tag), never by istio-injection. "" is the default
	// revision, which istio-injection=enabled selects.
	Revision string
	// CNI renders the injector for Istio's CNI node agent
	// (pilot.cni.enabled): pods get the istio-validation init container
	// instead of istio-init, and their traffic is captured (interception
	// mode REDIRECT) by the rules the istio-cni plugin writes (InstallCNI).
	// Without it the mesh captures nothing (interceptionMode NONE: see the
	// package doc).
	CNI bool
	// Platform is the chart's global.platform, whose profile the chart
	// applies: "openshift" (CNI chained by multus, the proxy's UID and GID
	// from the namespace's ranges), or "".
	Platform string
	// Values are merged over the chart's defaults and the harness's
	// overrides, like helm --set.
	Values map[string]any
	// Log receives istiod's output; nil discards it.
	Log io.Writer
}

// Istiod is istiod running outside the cluster as its sidecar injector.
type Istiod struct {
	client   kubernetes.Interface
	proc     *cluster.Process
	dir      string
	opts     Options
	values   map[string]any // as rendered, the harness's included
	version  string         // the cluster's, for the charts
	webhook  string         // the injector's MutatingWebhookConfiguration
	caBundle []byte
}

// Start renders Istio's istio-discovery chart with Helm as `helm install`
// would (Render), writes the ConfigMaps it renders into istio-system,
// starts istiod against the cluster with the environment of the chart's
// Deployment and every listener on 127.0.0.1, waits until it injects, and
// registers the chart's injection webhook. On error everything started is
// stopped.
func Start(ctx context.Context, c *cluster.Cluster, opts Options) (_ *Istiod, err error) {
	if opts.Platform == "openshift" && !opts.CNI {
		return nil, fmt.Errorf("platform openshift: its mesh runs Istio CNI (Options.CNI)")
	}
	r := opts.Release
	if err := r.Built(); err != nil {
		return nil, err
	}
	if opts.NativeSidecars == "" {
		opts.NativeSidecars = "false"
	}
	if n := opts.NativeSidecars; n != "false" && n != "true" && n != "auto" {
		return nil, fmt.Errorf("NativeSidecars %q: want false, true or auto", n)
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	ports, err := cluster.FreePorts(6)
	if err != nil {
		return nil, err
	}
	httpsPort, httpPort, grpcPort, secureGRPCPort, monitoringPort, ctrlzPort := ports[0], ports[1], ports[2], ports[3], ports[4], ports[5]
	url := fmt.Sprintf("https://127.0.0.1:%d/inject", httpsPort)
	values := chartValues(opts, url, c.CA().CertPEM)
	objs, err := Render(r.ChartDir(), "istiod"+suffix(opts.Revision), Namespace, c.Version(), values)
	if err != nil {
		return nil, err
	}
	if err := applyConfigMaps(ctx, c.Client(), objs); err != nil {
		return nil, err
	}
	webhook := WebhookConfigurationName + suffix(opts.Revision)
	mwc, err := webhookFrom(objs, webhook)
	if err != nil {
		return nil, err
	}
	env, args, err := deploymentCommand(objs, "istiod"+suffix(opts.Revision))
	if err != nil {
		return nil, err
	}

	// Under the cluster's work dir: removed with it, and swept with it after
	// a crash.
	dir, err := os.MkdirTemp(c.Dir(), "istiod-")
	if err != nil {
		return nil, err
	}
	i := &Istiod{client: c.Client(), dir: dir, opts: opts, values: values, version: c.Version(), webhook: webhook, caBundle: c.CA().CertPEM}
	defer func() {
		if err != nil {
			_ = i.Stop()
		}
	}()
	cert, key, err := c.CA().Serving("istiod" + suffix(opts.Revision) + "." + Namespace + ".svc")
	if err != nil {
		return nil, err
	}
	for name, data := range map[string][]byte{"tls.crt": cert, "tls.key": key, "ca.crt": c.CA().CertPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return nil, err
		}
	}
	addr := func(port int) string { return fmt.Sprintf("127.0.0.1:%d", port) }
	// The chart's arguments, then where the harness listens (a later flag
	// wins).
	args = append(args,
		"--kubeconfig="+c.Kubeconfig(),
		"--httpsAddr="+addr(httpsPort), "--httpAddr="+addr(httpPort),
		"--grpcAddr="+addr(grpcPort), "--secureGRPCAddr="+addr(secureGRPCPort),
		"--monitoringAddr="+addr(monitoringPort),
		"--ctrlz_address=127.0.0.1", fmt.Sprintf("--ctrlz_port=%d", ctrlzPort),
		"--tlsCertFile="+filepath.Join(dir, "tls.crt"), "--tlsKeyFile="+filepath.Join(dir, "tls.key"),
		"--caCertFile="+filepath.Join(dir, "ca.crt"),
	)
	i.proc, err = cluster.StartProcess("istiod"+suffix(opts.Revision), opts.Log, harnessEnv(env, c.Kubeconfig()), filepath.Join(r.BinDir(), "pilot-discovery"), args...)
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
	if err := i.register(ctx, mwc); err != nil {
		return nil, fmt.Errorf("registering istiod: %w", err)
	}
	return i, nil
}

// Revision is the revision istiod injects as ("default" for the default
// one), as injected pods record it (their istio.io/rev annotation).
func (i *Istiod) Revision() string { return cmp.Or(i.opts.Revision, "default") }

// Release is the Istio release istiod runs.
func (i *Istiod) Release() Release { return i.opts.Release }

// Tag points the revision tag tag at this istiod, as `istioctl tag set TAG
// --revision REVISION --overwrite` does: the chart's
// istio-revision-tag-TAG webhook configuration, rendered for this istiod,
// replaces any of that name (so a tag of another istiod moves here).
// Releases before 1.27 render it without a CA bundle, which istiod's CA
// patcher (off here) would fill in; the harness fills it in.
func (i *Istiod) Tag(ctx context.Context, tag string) error {
	values := deepCopy(i.values).(map[string]any)
	values["revisionTags"] = []any{tag}
	objs, err := Render(i.opts.Release.ChartDir(), "istiod"+suffix(i.opts.Revision), Namespace, i.version, values)
	if err != nil {
		return err
	}
	mwc, err := webhookFrom(objs, TagWebhookConfigurationName(tag))
	if err != nil {
		return err
	}
	return i.register(ctx, mwc)
}

// TagWebhookConfigurationName is the webhook configuration of revision tag
// tag (the chart's and istioctl's name for it).
func TagWebhookConfigurationName(tag string) string { return "istio-revision-tag-" + tag }

// register creates the webhook configuration, or replaces the one of its
// name, with istiod's CA bundle in every webhook that lacks one.
func (i *Istiod) register(ctx context.Context, mwc *admissionregistrationv1.MutatingWebhookConfiguration) error {
	for n := range mwc.Webhooks {
		if len(mwc.Webhooks[n].ClientConfig.CABundle) == 0 {
			mwc.Webhooks[n].ClientConfig.CABundle = i.caBundle
		}
	}
	mwcs := i.client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	_, err := mwcs.Create(ctx, mwc, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		var old *admissionregistrationv1.MutatingWebhookConfiguration
		if old, err = mwcs.Get(ctx, mwc.Name, metav1.GetOptions{}); err == nil {
			mwc.ResourceVersion = old.ResourceVersion
			_, err = mwcs.Update(ctx, mwc, metav1.UpdateOptions{})
		}
	}
	return err
}

// Stop unregisters the webhook and every revision tag still pointing at
// this istiod (so that pods can be created without it again, as after
// `istioctl uninstall --revision`), stops istiod and removes its files.
// The ConfigMaps stay, as after helm's webhook is gone; a later Start
// replaces them.
func (i *Istiod) Stop() error {
	var errs []error
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	mwcs := i.client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	names := []string{i.webhook}
	tags, err := mwcs.List(ctx, metav1.ListOptions{LabelSelector: "istio.io/tag,istio.io/rev=" + i.Revision()})
	if err != nil {
		errs = append(errs, fmt.Errorf("listing the revision tags: %w", err))
	} else {
		for _, t := range tags.Items {
			names = append(names, t.Name)
		}
	}
	for _, name := range names {
		err := mwcs.Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("unregistering %s: %w", name, err))
		}
	}
	if i.proc != nil {
		errs = append(errs, i.proc.Stop())
	}
	errs = append(errs, os.RemoveAll(i.dir))
	return errors.Join(errs...)
}

// suffix is what the chart appends to names for a revision.
func suffix(revision string) string {
	if revision == "" {
		return ""
	}
	return "-" + revision
}

// chartValues are the values the harness installs the chart with (see the
// package doc for why each), opts.Values over them, and where istiod
// listens outside the cluster (istiodRemote.injectionURL and its CA: the
// chart's way of pointing the API server at an istiod elsewhere).
func chartValues(opts Options, injectionURL string, caPEM []byte) map[string]any {
	// The init container (istio-init, istio-validation) runs the proxy's
	// image too, named apart in the chart.
	global := map[string]any{
		"proxy":           map[string]any{"image": opts.Release.ProxyImage()},
		"proxy_init":      map[string]any{"image": opts.Release.ProxyImage()},
		"imagePullPolicy": string(corev1.PullIfNotPresent),
	}
	if opts.Platform != "" {
		global["platform"] = opts.Platform
	}
	v := map[string]any{
		"global":   global,
		"revision": opts.Revision,
		"env":      map[string]any{"ENABLE_NATIVE_SIDECARS": opts.NativeSidecars},
	}
	switch {
	case !opts.CNI:
		v["meshConfig"] = map[string]any{"defaultConfig": map[string]any{"interceptionMode": "NONE"}}
	case opts.Platform == "":
		// A platform's profile says how CNI is chained (openshift: multus).
		v["pilot"] = map[string]any{"cni": map[string]any{"enabled": true}}
	}
	mergeInto(v, deepCopy(opts.Values).(map[string]any))
	mergeInto(v, map[string]any{"istiodRemote": map[string]any{
		"injectionURL":      injectionURL,
		"injectionCABundle": base64.StdEncoding.EncodeToString(caPEM),
	}})
	return v
}

// webhookFrom is the rendered MutatingWebhookConfiguration name.
func webhookFrom(objs []*unstructured.Unstructured, name string) (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	u := Find(objs, "MutatingWebhookConfiguration", name)
	if u == nil {
		return nil, fmt.Errorf("the chart rendered no MutatingWebhookConfiguration %s", name)
	}
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &mwc); err != nil {
		return nil, fmt.Errorf("MutatingWebhookConfiguration %s: %w", name, err)
	}
	return &mwc, nil
}

// deploymentCommand is the environment and arguments the chart's istiod
// Deployment gives its discovery container: literal values as they are,
// values from the pod's own fields as the pod would see them (its name,
// namespace and ServiceAccount), and none from its resources (GOMAXPROCS,
// GOMEMLIMIT: the process's own defaults), secrets or ConfigMaps.
func deploymentCommand(objs []*unstructured.Unstructured, name string) (env, args []string, err error) {
	u := Find(objs, "Deployment", name)
	if u == nil {
		return nil, nil, fmt.Errorf("the chart rendered no Deployment %s", name)
	}
	var d appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &d); err != nil {
		return nil, nil, fmt.Errorf("Deployment %s: %w", name, err)
	}
	spec := d.Spec.Template.Spec
	i := slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == "discovery" })
	if i < 0 {
		return nil, nil, fmt.Errorf("Deployment %s has no discovery container", name)
	}
	fields := map[string]string{
		"metadata.name":           name + "-harness",
		"metadata.namespace":      Namespace,
		"spec.serviceAccountName": spec.ServiceAccountName,
	}
	for _, e := range spec.Containers[i].Env {
		switch {
		case e.ValueFrom == nil:
			env = append(env, e.Name+"="+e.Value)
		case e.ValueFrom.FieldRef != nil:
			if v, ok := fields[e.ValueFrom.FieldRef.FieldPath]; ok {
				env = append(env, e.Name+"="+v)
			}
		}
	}
	return env, spec.Containers[i].Args, nil
}

// harnessEnv is the chart's environment for istiod with what running
// outside the cluster needs over it: its kubeconfig, no cloud platform
// probing, and no patching of webhook configurations (the harness
// registers them with their CA bundle; the chart leaves that to istiod,
// which would write the same CA).
func harnessEnv(chart []string, kubeconfig string) []string {
	env := map[string]string{}
	for _, e := range chart {
		k, v, _ := strings.Cut(e, "=")
		env[k] = v
	}
	maps.Copy(env, map[string]string{
		"KUBECONFIG":                     kubeconfig,
		"CLOUD_PLATFORM":                 "none",
		"INJECTION_WEBHOOK_CONFIG_NAME":  "",
		"VALIDATION_WEBHOOK_CONFIG_NAME": "",
	})
	out := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
}

// applyConfigMaps creates istio-system and writes every ConfigMap the chart
// rendered (istiod's mesh config and injector's, istio[-REVISION] and
// istio-sidecar-injector[-REVISION], among them).
func applyConfigMaps(ctx context.Context, client kubernetes.Interface, objs []*unstructured.Unstructured) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating %s: %w", Namespace, err)
	}
	cms := client.CoreV1().ConfigMaps(Namespace)
	for _, u := range objs {
		if u.GetKind() != "ConfigMap" {
			continue
		}
		var cm corev1.ConfigMap
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &cm); err != nil {
			return fmt.Errorf("ConfigMap %s: %w", u.GetName(), err)
		}
		cm.Namespace = Namespace
		_, err := cms.Create(ctx, &cm, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			_, err = cms.Update(ctx, &cm, metav1.UpdateOptions{})
		}
		if err != nil {
			return fmt.Errorf("writing ConfigMap %s: %w", cm.Name, err)
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
