package proxyquit

import (
	"context"
	"errors"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/httpstream"
	utilexec "k8s.io/client-go/util/exec"
)

// Reasons a quit fails for good: the `reason` label of the final failures
// counter, a closed set.
const (
	FinalDenied   = "denied"    // the API server refused the exec (403: the exec policy, RBAC)
	FinalRejected = "rejected"  // the API server found the exec request invalid for this pod (400, 422)
	FinalExitCode = "exit_code" // the quit command ran and exited non-zero
	FinalNotFound = "not_found" // the quit command is not in the container: not Istio's proxy
)

// finalFailure says whether an exec error is the pod's own and so cannot
// change until the pod does (reason, true), or may pass (the API server
// down or throttled, a timeout, a connection lost: false). Only a fresh
// state of the pod is worth another try after a final failure; retrying the
// same one would hold the dispatchers' workers for nothing.
func finalFailure(err error) (string, bool) {
	var exit utilexec.ExitError
	if errors.As(err, &exit) {
		return FinalExitCode, true
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return "", false
	}
	// Over WebSocket the API server's answer to the upgrade comes inside
	// an UpgradeFailureError, which does not unwrap.
	var upgrade *httpstream.UpgradeFailureError
	if errors.As(err, &upgrade) && upgrade.Cause != nil {
		err = upgrade.Cause
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		switch status.Status().Code {
		case http.StatusForbidden:
			return FinalDenied, true
		case http.StatusBadRequest, http.StatusUnprocessableEntity:
			return FinalRejected, true
		}
	}
	// The runtime's words when the program is missing (runc, crun, and
	// the API server's container check), from the exec's error stream.
	msg := strings.ToLower(err.Error())
	for _, s := range []string{"executable file not found", "no such file or directory"} {
		if strings.Contains(msg, s) {
			return FinalNotFound, true
		}
	}
	return "", false
}
