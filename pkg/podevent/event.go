package podevent

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"k8s.io/apimachinery/pkg/types"

	"github.com/istio-aux/istio-aux/pkg/slim"
)

// ID is the deterministic event id of one observed pod state. (JetStream
// deduplicates on slim.DedupID instead: see there why.)
func ID(uid types.UID, resourceVersion string) string {
	return string(uid) + "/" + resourceVersion
}

// Subject follows ApiServerSource's convention for a pod.
func Subject(namespace, name string) string {
	return "/apis/v1/namespaces/" + namespace + "/pods/" + name
}

// New builds the bridge's CloudEvent for a slim pod.
func New(source string, p *slim.Pod) (cloudevents.Event, error) {
	e := cloudevents.NewEvent()
	e.SetID(ID(p.UID, p.ResourceVersion))
	e.SetType(TypePodUpdated)
	e.SetSource(source)
	e.SetSubject(Subject(p.Namespace, p.Name))
	e.SetExtension(ExtNamespace, p.Namespace)
	e.SetExtension(ExtName, p.Name)
	e.SetExtension(ExtKind, "Pod")
	e.SetExtension(ExtAPIVersion, "v1")
	if err := e.SetData(cloudevents.ApplicationJSON, p); err != nil {
		return e, fmt.Errorf("encoding pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	return e, nil
}

// ErrInvalid marks an event that can never be handled, however often it is
// redelivered: callers answer 400 (HTTP) or terminate it (JetStream).
var ErrInvalid = errors.New("invalid pod event")

// Decode validates an event against the contract and returns the pod it
// names, as a slim pod: the bridge's slim pod, or an ApiServerSource event's
// full pod read into the slim form. Decoding is bounded (pkg/slim's bounds):
// whatever the data holds, it costs a bounded amount of memory. Every error
// wraps ErrInvalid.
func Decode(e cloudevents.Event) (*slim.Pod, error) {
	if !Accepted(e.Type()) {
		return nil, fmt.Errorf("%w: unsupported type %q", ErrInvalid, e.Type())
	}
	if err := e.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	data := e.Data()
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: no data", ErrInvalid)
	}
	if len(data) > MaxDataBytes {
		return nil, fmt.Errorf("%w: data is %d bytes, more than %d", ErrInvalid, len(data), MaxDataBytes)
	}
	if ct := e.DataContentType(); ct != "" && !strings.HasPrefix(ct, cloudevents.ApplicationJSON) {
		return nil, fmt.Errorf("%w: data content type %q is not JSON", ErrInvalid, ct)
	}
	pod := &slim.Pod{}
	if err := json.Unmarshal(data, pod); err != nil {
		return nil, fmt.Errorf("%w: data is not a pod: %v", ErrInvalid, err)
	}
	if pod.Kind != "" && pod.Kind != "Pod" {
		return nil, fmt.Errorf("%w: data is a %q, not a Pod", ErrInvalid, pod.Kind)
	}
	if pod.Name == "" || pod.Namespace == "" || pod.UID == "" {
		return nil, fmt.Errorf("%w: pod needs a name, a namespace and a uid", ErrInvalid)
	}
	// An event whose envelope names another pod than its data is forged or
	// broken; acting on either would be a guess.
	if s := e.Subject(); s != "" && s != Subject(pod.Namespace, pod.Name) {
		return nil, fmt.Errorf("%w: subject %q does not name pod %s/%s", ErrInvalid, s, pod.Namespace, pod.Name)
	}
	for ext, want := range map[string]string{ExtNamespace: pod.Namespace, ExtName: pod.Name} {
		if v, ok := e.Extensions()[ext]; ok {
			if got, _ := v.(string); got != want {
				return nil, fmt.Errorf("%w: extension %s=%v does not match the pod", ErrInvalid, ext, v)
			}
		}
	}
	return pod, nil
}
