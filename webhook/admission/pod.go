package admission

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	kjson "sigs.k8s.io/json"

	"github.com/istio-aux/istio-aux/pkg/decision"
	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/webhook/proxyconfig"
)

// Pod is what Mutate reads of a pod: the labels and annotations that decide
// it, whether it runs on the host's network, and whether Istio's proxy is
// already a native sidecar. Its JSON tags name exactly those fields, so the
// standard decoder (case-sensitive, as the API server reads JSON: with
// encoding/json's case folding "Metadata" would be read too, and a patch
// built from it would not apply) skips everything else without unquoting
// it: a pod may carry megabytes of labels the webhook never looks at.
type Pod struct {
	Metadata *struct {
		Namespace   string          `json:"namespace"`
		Labels      *podLabels      `json:"labels"`
		Annotations *podAnnotations `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		HostNetwork    bool            `json:"hostNetwork"`
		RestartPolicy  string          `json:"restartPolicy"`
		InitContainers []initContainer `json:"initContainers"`
	} `json:"spec"`
}

// podLabels are the labels Mutate reads (keys.LabelEnabled, keys.KeyInject,
// keys.LabelWatched; TestPodTagsAreTheKeys).
type podLabels struct {
	Enabled value `json:"istio-aux.dev/enabled"`
	Inject  value `json:"sidecar.istio.io/inject"`
	Watched value `json:"istio-aux.dev/watched"`
}

// podAnnotations are the annotations Mutate reads (keys.AnnotationEnabled,
// keys.KeyInject, keys.AnnotationNativeSidecar, keys.AnnotationProxyConfig).
type podAnnotations struct {
	Enabled     value       `json:"istio-aux.dev/enabled"`
	Inject      value       `json:"sidecar.istio.io/inject"`
	Native      value       `json:"sidecar.istio.io/nativeSidecar"`
	ProxyConfig configValue `json:"proxy.istio.io/config"`
}

// value is a label or annotation value and whether the key is there. A null
// value counts as there: the API server decodes it as "".
type value struct {
	text string
	set  bool
}

// UnmarshalJSON implements json.Unmarshaler.
func (v *value) UnmarshalJSON(b []byte) error {
	v.set = true
	return json.Unmarshal(b, &v.text) // null leaves ""
}

// configValue is the proxy.istio.io/config annotation, unquoted only when it
// can be within proxyconfig.MaxBytes: JSON writes a character in at most 6
// bytes (\uXXXX), so a longer literal is over the limit whatever it says,
// and unquoting it would cost buffers as long as the literal (the API server
// escapes every <, > and &: 256 KiB of & is 1.5 MiB of JSON).
type configValue struct {
	value
	tooLong bool
}

// maxConfigJSON is the longest JSON literal configValue unquotes: quotes
// and the limit's worth of 6-byte escapes.
const maxConfigJSON = 2 + 6*proxyconfig.MaxBytes

// UnmarshalJSON implements json.Unmarshaler.
func (c *configValue) UnmarshalJSON(b []byte) error {
	if len(b) > maxConfigJSON {
		c.set, c.tooLong = true, true
		if b[0] != '"' {
			return json.Unmarshal(b, new(string)) // the type error
		}
		return nil
	}
	return c.value.UnmarshalJSON(b)
}

// initContainer is one of the pod's init containers, reduced as it is read
// to whether it is Istio's native proxy: a pod may list thousands, and only
// that matters to Mutate.
type initContainer bool

// UnmarshalJSON implements json.Unmarshaler. An element whose JSON has
// neither the proxy's name nor an escape cannot be named istio-proxy, and is
// not decoded further (the review's decoder has checked its syntax).
func (c *initContainer) UnmarshalJSON(b []byte) error {
	if !bytes.Contains(b, proxyName) && bytes.IndexByte(b, '\\') < 0 {
		*c = false
		return nil
	}
	var v struct {
		Name          string                         `json:"name"`
		RestartPolicy *corev1.ContainerRestartPolicy `json:"restartPolicy"`
	}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(b, &v); err != nil {
		return err
	}
	*c = initContainer(decision.IsNativeProxy(v.Name, v.RestartPolicy))
	return nil
}

var proxyName = []byte(`"` + keys.ProxyContainer + `"`)

// nativeProxy reports whether the pod already runs istio-proxy as a native
// sidecar.
func (p *Pod) nativeProxy() bool {
	for _, c := range p.Spec.InitContainers {
		if c {
			return true
		}
	}
	return false
}

// optIn returns the pod's opt-in label and annotation as decision.OptedIn
// reads them: maps holding the one key each when it is there.
func (p *Pod) optIn() (labels, annotations map[string]string) {
	if p.Metadata == nil {
		return nil, nil
	}
	if l := p.Metadata.Labels; l != nil && l.Enabled.set {
		labels = map[string]string{keys.LabelEnabled: l.Enabled.text}
	}
	if a := p.Metadata.Annotations; a != nil && a.Enabled.set {
		annotations = map[string]string{keys.AnnotationEnabled: a.Enabled.text}
	}
	return labels, annotations
}

// inject returns the pod's sidecar.istio.io/inject, label first, as Istio's
// injector reads it.
func (p *Pod) inject() string {
	if p.Metadata == nil {
		return ""
	}
	if l := p.Metadata.Labels; l != nil && l.Inject.set {
		return l.Inject.text
	}
	if a := p.Metadata.Annotations; a != nil {
		return a.Inject.text
	}
	return ""
}

// annotations returns the pod's annotations Mutate reads (none set when
// it has none).
func (p *Pod) annotations() *podAnnotations {
	if p.Metadata == nil || p.Metadata.Annotations == nil {
		return &noAnnotations
	}
	return p.Metadata.Annotations
}

// noAnnotations stands for a pod without annotations; nothing writes it.
var noAnnotations podAnnotations

// runsToCompletion reports whether the pod's containers are not restarted
// once they exit (decision.RunsToCompletion). The API server defaults the
// policy before admission; an object without one reads as Always.
func (p *Pod) runsToCompletion() bool {
	return decision.RunsToCompletion(corev1.RestartPolicy(p.Spec.RestartPolicy))
}

// watched reports whether the pod already carries keys.LabelWatched=true.
func (p *Pod) watched() bool {
	return p.Metadata != nil && p.Metadata.Labels != nil && p.Metadata.Labels.Watched.text == "true"
}

// shape says which of /metadata, /metadata/annotations and /metadata/labels
// exist (non-null) in the object: a JSON patch can only add a member to an
// object that is there.
type shape struct{ metadata, annotations, labels bool }

func (p *Pod) shape() shape {
	if p.Metadata == nil {
		return shape{}
	}
	return shape{metadata: true, annotations: p.Metadata.Annotations != nil, labels: p.Metadata.Labels != nil}
}

// DecodePod decodes an admission object on its own (the review decoder reads
// it in place, and calls this only to say what is wrong with an object it
// could not read). The error says whether the object is not JSON or not a
// pod.
func DecodePod(raw []byte) (*Pod, error) {
	var p *Pod
	if err := kjson.UnmarshalCaseSensitivePreserveInts(raw, &p); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field != "" {
			return nil, fmt.Errorf("object is not a Pod: %w", err)
		}
		return nil, fmt.Errorf("object is not a JSON object: %w", err)
	}
	if p == nil {
		return nil, errNoObject
	}
	return p, nil
}

// errNoObject: the request's object is null or missing.
var errNoObject = errors.New("object is not a JSON object: it is null or missing")
