package openshift

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// The namespace annotations OpenShift's namespace allocator writes, from
// which SCC admission (and istiod, on the openshift platform) read a
// namespace's ranges.
const (
	AnnotationUIDRange          = "openshift.io/sa.scc.uid-range"
	AnnotationSupplementalGroup = "openshift.io/sa.scc.supplemental-groups"
	AnnotationMCS               = "openshift.io/sa.scc.mcs"
	// AnnotationSCC is where SCC admission records the SCC it chose.
	AnnotationSCC = "openshift.io/scc"
)

// The two SCCs the stand-in knows: restricted-v2, which every
// authenticated user may use and which is tried first, and privileged,
// which only those granted its use get (platform ServiceAccounts, cluster
// administrators).
const (
	RestrictedV2 = "restricted-v2"
	Privileged   = "privileged"
)

// Block is a range of IDs.
type Block struct{ Start, End int64 }

// ParseBlock reads a block as OpenShift writes it, "START/SIZE", or as it
// also accepts it, "START-END".
func ParseBlock(s string) (Block, error) {
	var b Block
	if strings.Contains(s, "/") {
		var size int64
		if _, err := fmt.Sscanf(s, "%d/%d", &b.Start, &size); err != nil || size < 1 {
			return Block{}, fmt.Errorf("block %q: want START/SIZE", s)
		}
		b.End = b.Start + size - 1
	} else if _, err := fmt.Sscanf(s, "%d-%d", &b.Start, &b.End); err != nil {
		return Block{}, fmt.Errorf("block %q: want START/SIZE or START-END", s)
	}
	if b.Start < 0 || b.End < b.Start || b.End > 1<<32-1 {
		return Block{}, fmt.Errorf("block %q: out of range", s)
	}
	return b, nil
}

// Ranges are a namespace's IDs: its UIDs, its first block of
// supplemental groups (or its UIDs, without any), and its SELinux level.
type Ranges struct {
	UID, Groups Block
	MCS         string
}

// RangesOf reads the namespace's annotations; a namespace the allocator
// has not annotated has no ranges, and SCC admission refuses its pods.
func RangesOf(ns *corev1.Namespace) (Ranges, error) {
	uid, ok := ns.Annotations[AnnotationUIDRange]
	if !ok {
		return Ranges{}, fmt.Errorf("namespace %s has no %s annotation", ns.Name, AnnotationUIDRange)
	}
	var r Ranges
	var err error
	if r.UID, err = ParseBlock(uid); err != nil {
		return Ranges{}, fmt.Errorf("namespace %s: %w", ns.Name, err)
	}
	r.Groups = r.UID
	if g, ok := ns.Annotations[AnnotationSupplementalGroup]; ok {
		first, _, _ := strings.Cut(g, ",")
		if r.Groups, err = ParseBlock(first); err != nil {
			return Ranges{}, fmt.Errorf("namespace %s: %w", ns.Name, err)
		}
	}
	r.MCS = ns.Annotations[AnnotationMCS]
	return r, nil
}

// allowedVolumes are restricted-v2's volume types (OpenShift 4.18's).
var allowedVolumes = []string{"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}

// Admit gives the pod restricted-v2's defaults, as SCC admission does
// before any webhook: the pod's fsGroup (the first group of the range)
// and seccomp profile (RuntimeDefault) where unset, and each container's
// UID (the first of the range), non-root, no privilege escalation and the
// ALL capabilities dropped, where unset. What it does not set (an SELinux
// level: the nodes here run without SELinux) it does not check either.
func Admit(p *corev1.Pod, r Ranges) {
	if p.Spec.SecurityContext == nil {
		p.Spec.SecurityContext = &corev1.PodSecurityContext{}
	}
	psc := p.Spec.SecurityContext
	if psc.FSGroup == nil {
		psc.FSGroup = ptr.To(r.Groups.Start)
	}
	if psc.SeccompProfile == nil {
		psc.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	}
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range cs {
			c := &cs[i]
			if c.SecurityContext == nil {
				c.SecurityContext = &corev1.SecurityContext{}
			}
			sc := c.SecurityContext
			if sc.RunAsUser == nil && psc.RunAsUser == nil {
				sc.RunAsUser = ptr.To(r.UID.Start)
			}
			if sc.RunAsNonRoot == nil && psc.RunAsNonRoot == nil {
				sc.RunAsNonRoot = ptr.To(true)
			}
			if sc.AllowPrivilegeEscalation == nil {
				sc.AllowPrivilegeEscalation = ptr.To(false)
			}
			if sc.Capabilities == nil {
				sc.Capabilities = &corev1.Capabilities{}
			}
			if !slices.Contains(sc.Capabilities.Drop, "ALL") {
				sc.Capabilities.Drop = append(sc.Capabilities.Drop, "ALL")
			}
		}
	}
}

// Validate lists what restricted-v2 refuses in the pod, as SCC admission
// validates it after every webhook: host namespaces and ports, volumes
// outside its list, an fsGroup other than the range's first group, a
// seccomp profile other than RuntimeDefault, and in each container a UID
// unset or outside the range, privilege, privilege escalation not turned
// off, a capability added other than NET_BIND_SERVICE, ALL not dropped.
func Validate(p *corev1.Pod, r Ranges) []string {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	s := p.Spec
	if s.HostNetwork || s.HostPID || s.HostIPC {
		bad("host namespaces are not allowed")
	}
	for _, v := range s.Volumes {
		if t := volumeType(v); !slices.Contains(allowedVolumes, t) {
			bad("volume %s: %s volumes are not allowed", v.Name, t)
		}
	}
	psc := ptr.Deref(s.SecurityContext, corev1.PodSecurityContext{})
	if psc.FSGroup == nil || *psc.FSGroup != r.Groups.Start {
		bad("fsGroup %s: must be %d", show(psc.FSGroup), r.Groups.Start)
	}
	if !runtimeDefault(psc.SeccompProfile) {
		bad("pod seccomp profile: must be RuntimeDefault")
	}
	for _, cs := range [][]corev1.Container{s.InitContainers, s.Containers} {
		for _, c := range cs {
			sc := ptr.Deref(c.SecurityContext, corev1.SecurityContext{})
			uid := sc.RunAsUser
			if uid == nil {
				uid = psc.RunAsUser
			}
			if uid == nil || *uid < r.UID.Start || *uid > r.UID.End {
				bad("container %s: runAsUser %s: must be in %d-%d", c.Name, show(uid), r.UID.Start, r.UID.End)
			}
			if ptr.Deref(sc.Privileged, false) {
				bad("container %s: privileged containers are not allowed", c.Name)
			}
			if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
				bad("container %s: allowPrivilegeEscalation must be false", c.Name)
			}
			caps := ptr.Deref(sc.Capabilities, corev1.Capabilities{})
			for _, a := range caps.Add {
				if a != "NET_BIND_SERVICE" {
					bad("container %s: capability %s is not allowed", c.Name, a)
				}
			}
			if !slices.Contains(caps.Drop, "ALL") {
				bad("container %s: capabilities must drop ALL", c.Name)
			}
			if sc.SeccompProfile != nil && !runtimeDefault(sc.SeccompProfile) {
				bad("container %s: seccomp profile must be RuntimeDefault", c.Name)
			}
			for _, port := range c.Ports {
				if port.HostPort != 0 {
					bad("container %s: host ports are not allowed", c.Name)
				}
			}
		}
	}
	return errs
}

func runtimeDefault(p *corev1.SeccompProfile) bool {
	return p != nil && p.Type == corev1.SeccompProfileTypeRuntimeDefault
}

func show(v *int64) string {
	if v == nil {
		return "unset"
	}
	return fmt.Sprint(*v)
}

// volumeType is a volume's source as SCCs name it.
func volumeType(v corev1.Volume) string {
	switch s := v.VolumeSource; {
	case s.ConfigMap != nil:
		return "configMap"
	case s.CSI != nil:
		return "csi"
	case s.DownwardAPI != nil:
		return "downwardAPI"
	case s.EmptyDir != nil:
		return "emptyDir"
	case s.Ephemeral != nil:
		return "ephemeral"
	case s.PersistentVolumeClaim != nil:
		return "persistentVolumeClaim"
	case s.Projected != nil:
		return "projected"
	case s.Secret != nil:
		return "secret"
	case s.HostPath != nil:
		return "hostPath"
	default:
		return "other"
	}
}
