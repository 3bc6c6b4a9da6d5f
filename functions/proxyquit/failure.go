package proxyquit

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/httpstream"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/istio-aux/istio-aux/pkg/names"
)

// finalFailure says whether an exec error is the pod's own and so cannot
// change until the pod does (its names.Final* reason, true), or may pass
// (the API server down or throttled, a timeout, a connection lost: false).
// Only a fresh state of the pod is worth another try after a final
// failure; retrying the same one would hold the dispatchers' workers for
// nothing.
func finalFailure(err error) (string, bool) {
	var exit utilexec.ExitError
	if errors.As(err, &exit) {
		// Killed by a signal: most likely with its container, stopping
		// as the quit told it to, and the kubelet slow to say so. Another
		// delivery finds the proxy stopped (or quits it).
		return names.FinalExitCode, !killed(exit)
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
			return names.FinalDenied, true
		case http.StatusBadRequest, http.StatusUnprocessableEntity:
			return names.FinalRejected, true
		}
	}
	// The runtime's words when the program is missing (runc, crun, and
	// the API server's container check), from the exec's error stream.
	if says(err, "executable file not found", "no such file or directory") {
		return names.FinalNotFound, true
	}
	return "", false
}

// says reports whether err's text holds any of words, whatever its case:
// the runtime's words reach the function as text, wrapped as each API
// server and client version wraps them.
func says(err error, words ...string) bool {
	msg := strings.ToLower(err.Error())
	return slices.ContainsFunc(words, func(w string) bool { return strings.Contains(msg, strings.ToLower(w)) })
}

// containerStopped says whether the runtime refused the exec because its
// container is not running (its words: containerd's CRI, CRI-O, runc, a
// containerd task gone), however the API server passed them on. The proxy
// has then stopped, whoever stopped it, and the pod's status may not say
// so yet: the kubelet reports it a moment later. A second delivery of a
// quit reaches it in that moment when the first quit the proxy (a
// dispatcher replaced in a rolling upgrade delivers again what it had in
// hand).
func containerStopped(err error) bool {
	return says(err, "CONTAINER_EXITED", "container is not created or running", "cannot exec in a stopped state", "no running task found")
}

// quitMayBeUnderWay says whether an exec error leaves open that the quit
// command ran and istio-proxy is stopping: the command killed with its
// container (an exit code of 128 or more: a signal), the stream cut, a
// timeout, the container found stopped. An exec the API server answered
// with an error did not run, nor did one that found no program; a command
// that exited on its own with a code below 128 did not quit the proxy
// (pilot-agent's 255: Envoy refused).
func quitMayBeUnderWay(err error) bool {
	if containerStopped(err) {
		return true
	}
	var exit utilexec.ExitError
	if errors.As(err, &exit) {
		return killed(exit)
	}
	var upgrade *httpstream.UpgradeFailureError
	if errors.As(err, &upgrade) {
		return false
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return false
	}
	reason, final := finalFailure(err)
	return !final || reason == names.FinalExitCode
}

// killed says whether the exec'd command ended by a signal (an exit code of
// 129 to 254, as the runtime reports one), not on its own.
func killed(exit utilexec.ExitError) bool {
	return exit.ExitStatus() > 128 && exit.ExitStatus() < 255
}
