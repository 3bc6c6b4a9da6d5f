// Package install is what kubectl istio-aux reads of an installed
// istio-aux that both of its commands need: ConfigMap config-istio-aux, read
// as the components read it, and the webhook's endpoints. The names of the
// objects are pkg/names'.
package install
