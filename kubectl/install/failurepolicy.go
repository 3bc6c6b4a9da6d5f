package install

import admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

// FailsOpen says whether the API server lets a pod in unchanged when its
// call to webhook w fails: failurePolicy Ignore. Unset is the API
// server's default, Fail, which refuses the pod; istio-aux installs Fail.
func FailsOpen(w admissionregistrationv1.MutatingWebhook) bool {
	return w.FailurePolicy != nil && *w.FailurePolicy == admissionregistrationv1.Ignore
}
