package podevent

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"k8s.io/apimachinery/pkg/types"

	"github.com/istio-aux/istio-aux/pkg/decision"
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

// New builds the bridge's CloudEvent for a slim pod. Its data is what the
// decision reads of the pod (decision.Inputs), which keeps every event of a
// valid pod small (bridge/transport bounds a message). A pod whose lists are
// beyond the decoder's bounds (slim.WithinBounds: more than MaxContainers
// containers) travels as its identity only, with ExtIdentityOnly set: the
// function then decides on the live pod, which the API server bounds.
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
	data := decision.Inputs(p)
	if slim.WithinBounds(data) != nil {
		data = &slim.Pod{APIVersion: data.APIVersion, Kind: data.Kind, Meta: data.Meta}
		e.SetExtension(ExtIdentityOnly, "true")
	}
	if err := e.SetData(cloudevents.ApplicationJSON, data); err != nil {
		return e, fmt.Errorf("encoding pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	return e, nil
}

// IdentityOnly reports whether e names its pod without carrying its state
// (New, for a pod beyond the bounds): the live pod is all there is to
// decide on.
func IdentityOnly(e cloudevents.Event) bool {
	v, _ := e.Extensions()[ExtIdentityOnly].(string)
	return v == "true"
}

// ErrInvalid marks an event that can never be handled, however often it is
// redelivered: callers answer 400 (HTTP) or terminate it (JetStream).
var ErrInvalid = errors.New("invalid pod event")

// Decode validates an event against the contract and returns the pod it
// names, as a slim pod: the bridge's slim pod, or an ApiServerSource event's
// full pod read into the slim form. Decoding is bounded (pkg/slim's bounds):
// whatever the data holds, it costs a bounded amount of memory; a pod
// beyond them is an error that also wraps slim.ErrBeyondBounds. Every error
// wraps ErrInvalid.
func Decode(e cloudevents.Event) (*slim.Pod, error) {
	pod := &slim.Pod{}
	if err := decodeInto(e, pod); err != nil {
		return nil, err
	}
	return pod, nil
}

// DecodeIdentity is Decode reading only which pod the event names: for an
// event whose pod is beyond the bounds.
func DecodeIdentity(e cloudevents.Event) (*slim.Pod, error) {
	// Name, namespace and uid only: the labels and annotations, which may be
	// most of a hostile body, are skipped unread.
	var id struct {
		Kind string `json:"kind,omitempty"`
		Meta struct {
			Name      string    `json:"name,omitempty"`
			Namespace string    `json:"namespace,omitempty"`
			UID       types.UID `json:"uid,omitempty"`
		} `json:"metadata"`
	}
	if err := decodeInto(e, &id); err != nil {
		return nil, err
	}
	pod := &slim.Pod{Kind: id.Kind, Meta: slim.Meta{Name: id.Meta.Name, Namespace: id.Meta.Namespace, UID: id.Meta.UID}}
	if err := checkPod(e, pod); err != nil {
		return nil, err
	}
	return pod, nil
}

func decodeInto(e cloudevents.Event, into any) error {
	if !Accepted(e.Type()) {
		return fmt.Errorf("%w: unsupported type %q", ErrInvalid, e.Type())
	}
	if err := e.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	data := e.Data()
	if len(data) == 0 {
		return fmt.Errorf("%w: no data", ErrInvalid)
	}
	if len(data) > MaxDataBytes {
		return fmt.Errorf("%w: data is %d bytes, more than %d", ErrInvalid, len(data), MaxDataBytes)
	}
	if ct := e.DataContentType(); ct != "" && !strings.HasPrefix(ct, cloudevents.ApplicationJSON) {
		return fmt.Errorf("%w: data content type %q is not JSON", ErrInvalid, ct)
	}
	if err := json.Unmarshal(data, into); err != nil {
		return fmt.Errorf("%w: data is not a pod: %w", ErrInvalid, err)
	}
	if pod, ok := into.(*slim.Pod); ok {
		return checkPod(e, pod)
	}
	return nil
}

// checkPod holds the decoded pod to the envelope.
func checkPod(e cloudevents.Event, pod *slim.Pod) error {
	if pod.Kind != "" && pod.Kind != "Pod" {
		return fmt.Errorf("%w: data is a %q, not a Pod", ErrInvalid, pod.Kind)
	}
	if pod.Name == "" || pod.Namespace == "" || pod.UID == "" {
		return fmt.Errorf("%w: pod needs a name, a namespace and a uid", ErrInvalid)
	}
	// An event whose envelope names another pod than its data is forged or
	// broken; acting on either would be a guess.
	if s := e.Subject(); s != "" && s != Subject(pod.Namespace, pod.Name) {
		return fmt.Errorf("%w: subject %q does not name pod %s/%s", ErrInvalid, s, pod.Namespace, pod.Name)
	}
	for ext, want := range map[string]string{ExtNamespace: pod.Namespace, ExtName: pod.Name} {
		if v, ok := e.Extensions()[ext]; ok {
			if got, _ := v.(string); got != want {
				return fmt.Errorf("%w: extension %s=%v does not match the pod", ErrInvalid, ext, v)
			}
		}
	}
	return nil
}
