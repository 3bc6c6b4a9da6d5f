//go:build e2e

package istio

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/poll"
)

// TestIstiodInjects runs istiod against a bare control plane (no nodes)
// and records what real injection does to the pod shapes istio-aux cares
// about, in each ENABLE_NATIVE_SIDECARS mode.
func TestIstiodInjects(t *testing.T) {
	if err := Built(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	log, closeLog := cluster.ProcessLog("istio-aux-istiod-e2e.log", "E2E_VERBOSE")
	defer closeLog()
	c, err := cluster.Start(ctx, cluster.Options{Log: log})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	}()
	hold := map[string]string{"proxy.istio.io/config": "holdApplicationUntilProxyStarts: true\n"}
	cases := []struct {
		name        string
		annotations map[string]string
		labels      map[string]string
		noSA        bool
		want        map[string]string // by NativeSidecars mode: hold, native, last, none or rejected[: text]
	}{
		{name: "plain", want: map[string]string{"false": "last", "true": "native", "auto": "native"}},
		{name: "hold", annotations: hold, want: map[string]string{"false": "hold", "true": "native", "auto": "native"}},
		{name: "hold, proto spelling", annotations: map[string]string{"proxy.istio.io/config": "hold_application_until_proxy_starts: true"},
			want: map[string]string{"false": "hold", "true": "native", "auto": "native"}},
		{name: "native annotation", annotations: map[string]string{"sidecar.istio.io/nativeSidecar": "true"},
			want: map[string]string{"false": "native", "true": "native", "auto": "native"}},
		{name: "native annotation false, hold", annotations: map[string]string{"sidecar.istio.io/nativeSidecar": "false", "proxy.istio.io/config": "holdApplicationUntilProxyStarts: true"},
			want: map[string]string{"false": "hold", "true": "hold", "auto": "hold"}},
		{name: "hold as a string", annotations: map[string]string{"proxy.istio.io/config": `holdApplicationUntilProxyStarts: "true"`},
			want: map[string]string{"false": "rejected: cannot unmarshal", "true": "rejected: cannot unmarshal", "auto": "rejected: cannot unmarshal"}},
		{name: "invalid YAML", annotations: map[string]string{"proxy.istio.io/config": "{{"},
			want: map[string]string{"false": "rejected", "true": "rejected", "auto": "rejected"}},
		{name: "unknown key", annotations: map[string]string{"proxy.istio.io/config": "holdApplicationUntilProxyStarts: true\nnotAField: 1"},
			want: map[string]string{"false": "hold", "true": "native", "auto": "native"}},
		{name: "opted out", labels: map[string]string{"sidecar.istio.io/inject": "false"},
			want: map[string]string{"false": "none", "true": "none", "auto": "none"}},
		{name: "no service account", noSA: true,
			want: map[string]string{"false": "rejected: serviceAccountName", "true": "rejected: serviceAccountName", "auto": "rejected: serviceAccountName"}},
	}
	for _, mode := range []string{"false", "true", "auto"} {
		t.Run("native="+mode, func(t *testing.T) {
			start := time.Now()
			i, err := Start(ctx, c, Options{NativeSidecars: mode, Log: log})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := i.Stop(); err != nil {
					t.Error(err)
				}
			}()
			t.Logf("istiod up and registered in %s", time.Since(start).Round(time.Millisecond))
			ns := "inject-" + mode
			if _, err := c.Client().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
				Name: ns, Labels: map[string]string{"istio-injection": "enabled"}}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			for n, tc := range cases {
				pod := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", n), Annotations: tc.annotations, Labels: tc.labels},
					Spec: corev1.PodSpec{ServiceAccountName: ServiceAccount, RestartPolicy: corev1.RestartPolicyNever,
						Containers: []corev1.Container{{Name: "app", Image: "app"}}},
				}
				if tc.noSA {
					pod.Spec.ServiceAccountName = ""
				}
				created := time.Now()
				got, err := c.Client().CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
				took := time.Since(created)
				var position string
				if err != nil {
					position = "rejected: " + err.Error()
				} else {
					position = proxyPosition(got)
				}
				want := tc.want[mode]
				kind, text, _ := strings.Cut(want, ": ")
				if !strings.HasPrefix(position, kind) || !strings.Contains(position, text) {
					t.Errorf("%s: %s, want %s", tc.name, position, want)
				} else {
					t.Logf("%s: %s (CREATE %s)", tc.name, firstLine(position), took.Round(time.Millisecond))
				}
				if err == nil && position != "none" {
					checkInjected(t, tc.name, got)
				}
			}
			// A real node cannot start an injected pod before istiod has
			// published its root certificate there (a ConfigMap volume).
			if err := poll.Until(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
				_, err := c.Client().CoreV1().ConfigMaps(ns).Get(ctx, "istio-ca-root-cert", metav1.GetOptions{})
				return err == nil, err
			}); err != nil {
				t.Errorf("istio-ca-root-cert in %s: %v", ns, err)
			}
		})
	}
}

// proxyPosition says where injection put istio-proxy.
func proxyPosition(p *corev1.Pod) string {
	for _, c := range p.Spec.InitContainers {
		if c.Name == "istio-proxy" {
			return "native"
		}
	}
	for i, c := range p.Spec.Containers {
		if c.Name == "istio-proxy" {
			if i == 0 {
				return "hold"
			}
			return "last"
		}
	}
	return "none"
}

// checkInjected asserts what the harness relies on in every injected pod.
func checkInjected(t *testing.T, name string, p *corev1.Pod) {
	t.Helper()
	for _, c := range p.Spec.InitContainers {
		if c.Name == "istio-init" || c.Name == "istio-validation" {
			t.Errorf("%s: init container %s injected; interceptionMode NONE should leave it out", name, c.Name)
		}
	}
	var proxy corev1.Container
	for _, c := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
		if c.Name == "istio-proxy" {
			proxy = c
		}
	}
	if proxy.Image != ProxyImage || proxy.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("%s: proxy image %s (%s), want %s (IfNotPresent)", name, proxy.Image, proxy.ImagePullPolicy, ProxyImage)
	}
	if len(proxy.Args) < 2 || proxy.Args[0] != "proxy" || proxy.Args[1] != "sidecar" {
		t.Errorf("%s: proxy args %v", name, proxy.Args)
	}
	if os.Getenv("ISTIO_AUX_DUMP_PODS") != "" {
		t.Logf("%s: %+v", name, p.Spec)
	}
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
