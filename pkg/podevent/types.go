// Package podevent is the event contract between the bridge and the
// functions (docs/design.md, "What an event looks like"): the CloudEvent
// types and extensions, the deterministic id, the slim pod it carries
// (pkg/slim), and decoding with clear errors for anything that does not fit.
package podevent

// CloudEvent types istio-aux produces or accepts.
const (
	// TypePodUpdated is what the bridge publishes.
	TypePodUpdated = "dev.istio-aux.pod.updated"

	// Knative Eventing ApiServerSource (Resource mode) types, accepted so the
	// function can be subscribed to an ApiServerSource instead of the bridge.
	TypeAPIServerAdd    = "dev.knative.apiserver.resource.add"
	TypeAPIServerUpdate = "dev.knative.apiserver.resource.update"
	TypeAPIServerDelete = "dev.knative.apiserver.resource.delete"
)

// CloudEvent extension attributes, named as ApiServerSource names them.
const (
	ExtNamespace  = "namespace"
	ExtName       = "name"
	ExtKind       = "kind"
	ExtAPIVersion = "apiversion"
	// ExtIdentityOnly "true": the data names the pod but carries none of
	// its state (it is beyond the bounds); decide on the live pod.
	ExtIdentityOnly = "identityonly"
)

// MaxDataBytes bounds the event payload the decoder accepts. A slim pod is
// well under a KiB per container; a full pod from ApiServerSource rarely
// exceeds 64 KiB, and the API server's own limit on an object is 1.5 MiB.
const MaxDataBytes = 1 << 20

// Accepted reports whether a function should look at events of this type.
// Deletions are accepted too (and ignored by the decision: the pod is gone).
func Accepted(eventType string) bool {
	switch eventType {
	case TypePodUpdated, TypeAPIServerAdd, TypeAPIServerUpdate, TypeAPIServerDelete:
		return true
	}
	return false
}
