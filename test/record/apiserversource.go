package record

import (
	"fmt"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/istio-aux/istio-aux/pkg/podevent"
)

// APIServerSourceEvent is the CloudEvent a Knative ApiServerSource in
// Resource mode delivers for a watched object: type
// dev.knative.apiserver.resource.{add,update,delete}, the API server URL as
// source, the object's self-link-like subject, extensions kind, apiversion,
// name and namespace, a random id, and the whole object as JSON data.
func APIServerSourceEvent(source, eventType string, obj *unstructured.Unstructured) (cloudevents.Event, error) {
	e := cloudevents.NewEvent()
	e.SetID(string(uuid.NewUUID()))
	e.SetType(eventType)
	e.SetSource(source)
	e.SetSubject(podevent.Subject(obj.GetNamespace(), obj.GetName()))
	e.SetExtension(podevent.ExtKind, obj.GetKind())
	e.SetExtension(podevent.ExtAPIVersion, obj.GetAPIVersion())
	e.SetExtension(podevent.ExtName, obj.GetName())
	e.SetExtension(podevent.ExtNamespace, obj.GetNamespace())
	if err := e.SetData(cloudevents.ApplicationJSON, obj.Object); err != nil {
		return e, fmt.Errorf("encoding %s/%s: %w", obj.GetNamespace(), obj.GetName(), err)
	}
	return e, nil
}
