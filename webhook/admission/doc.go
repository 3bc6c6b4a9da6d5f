// Package admission is the webhook's pure part: what istio-aux does to a pod
// at CREATE (Mutate), the JSON patch that does it, the AdmissionReview it
// reads and the answer it writes (DecodeReview, Admit, Review.Respond), the
// webhook's settings (Config) and its MutatingWebhookConfiguration's
// webhooks (Webhooks). It imports no controller, informer, leader election
// or server, so that the kubectl plugin explains a pod with the same code
// the webhook runs (cmd/kubectl-istio_aux's deps test holds it so); package
// webhook serves it.
package admission
