package openshift

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestParseBlock(t *testing.T) {
	cases := map[string]struct {
		in      string
		want    Block
		wantErr bool
	}{
		"start/size":  {in: "1000680000/10000", want: Block{1000680000, 1000689999}},
		"start-end":   {in: "1000-1999", want: Block{1000, 1999}},
		"size 1":      {in: "5/1", want: Block{5, 5}},
		"empty size":  {in: "5/0", wantErr: true},
		"a number":    {in: "1000680000", wantErr: true},
		"words":       {in: "abc", wantErr: true},
		"end < start": {in: "20-10", wantErr: true},
		"past uint32": {in: "4294967295/2", wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ParseBlock(tc.in)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("ParseBlock(%q) = %v, %v; want %v, error %t", tc.in, got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestRangesOf(t *testing.T) {
	ns := func(a map[string]string) *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: a}}
	}
	if _, err := RangesOf(ns(nil)); err == nil {
		t.Error("a namespace without ranges has ranges")
	}
	r, err := RangesOf(ns(map[string]string{AnnotationUIDRange: "1000680000/10000"}))
	if err != nil || r.Groups != r.UID {
		t.Errorf("groups without their annotation: %v, %v; want the UIDs", r, err)
	}
	r, err = RangesOf(ns(map[string]string{AnnotationUIDRange: "1000680000/10000", AnnotationSupplementalGroup: "2000/5,3000/5"}))
	if err != nil || r.Groups != (Block{2000, 2004}) {
		t.Errorf("groups %v, %v; want the first block", r.Groups, err)
	}
	if _, err := RangesOf(ns(map[string]string{AnnotationUIDRange: "nope"})); err == nil {
		t.Error("a malformed range was read")
	}
}

// TestRestrictedV2: what SCC admission does to a pod in a namespace of
// range 1000680000/10000, then refuses after every webhook.
func TestRestrictedV2(t *testing.T) {
	r := Ranges{UID: Block{1000680000, 1000689999}, Groups: Block{1000680000, 1000689999}}
	proxy := func(uid int64) corev1.Container {
		return corev1.Container{Name: "istio-proxy", SecurityContext: &corev1.SecurityContext{
			RunAsUser: ptr.To(uid), RunAsNonRoot: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false),
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}
	}
	cases := map[string]struct {
		pod      func(*corev1.Pod)
		injected []corev1.Container // added after Admit, as a webhook adds them
		refused  []string           // substrings of the refusals
	}{
		"a plain pod":                          {},
		"the injected proxy, UID range's last": {injected: []corev1.Container{proxy(1000689999)}},
		"an injected proxy as 1337":            {injected: []corev1.Container{proxy(1337)}, refused: []string{"istio-proxy: runAsUser 1337"}},
		"a pinned UID outside the range": {pod: func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{RunAsUser: ptr.To(int64(65532))}
		}, refused: []string{"app: runAsUser 65532"}},
		"a pinned fsGroup": {pod: func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: ptr.To(int64(65532))}
		}, refused: []string{"fsGroup 65532"}},
		"istio-init (root, NET_ADMIN)": {injected: []corev1.Container{{Name: "istio-init", SecurityContext: &corev1.SecurityContext{
			RunAsUser: ptr.To(int64(0)), AllowPrivilegeEscalation: ptr.To(false),
			Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN", "NET_RAW"}, Drop: []corev1.Capability{"ALL"}}}}},
			refused: []string{"istio-init: runAsUser 0", "capability NET_ADMIN", "capability NET_RAW"}},
		"NET_BIND_SERVICE": {pod: func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE"}}}
		}},
		"a privileged container": {pod: func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
		}, refused: []string{"privileged"}},
		"a hostPath volume": {pod: func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "h", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
		}, refused: []string{"hostPath volumes"}},
		"host network": {pod: func(p *corev1.Pod) { p.Spec.HostNetwork = true }, refused: []string{"host namespaces"}},
		"an unconfined container": {pod: func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}}
		}, refused: []string{"app: seccomp"}},
		"a webhook's container without a UID": {injected: []corev1.Container{{Name: "late"}}, refused: []string{"late: runAsUser unset", "late: allowPrivilegeEscalation", "late: capabilities must drop ALL"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}}}
			if tc.pod != nil {
				tc.pod(p)
			}
			Admit(p, r)
			if got := *p.Spec.Containers[0].SecurityContext; tc.pod == nil && (*got.RunAsUser != r.UID.Start || !*got.RunAsNonRoot || *got.AllowPrivilegeEscalation) {
				t.Errorf("Admit gave the app %+v", got)
			}
			if tc.pod == nil && *p.Spec.SecurityContext.FSGroup != r.Groups.Start {
				t.Errorf("Admit gave fsGroup %d", *p.Spec.SecurityContext.FSGroup)
			}
			p.Spec.Containers = append(p.Spec.Containers, tc.injected...)
			errs := Validate(p, r)
			for _, want := range tc.refused {
				if !slices.ContainsFunc(errs, func(e string) bool { return strings.Contains(e, want) }) {
					t.Errorf("refusals %q lack %q", errs, want)
				}
			}
			if len(tc.refused) == 0 && len(errs) > 0 {
				t.Errorf("refused: %q", errs)
			}
		})
	}
}
