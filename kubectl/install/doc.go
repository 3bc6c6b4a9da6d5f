// Package install is what kubectl istio-aux reads of an installed
// istio-aux that both of its commands need: ConfigMap config-istio-aux, read
// as the components read it, the webhook's endpoints, and what its failurePolicy
// does to a pod when a call fails. The names of the
// objects are pkg/names'.
package install
