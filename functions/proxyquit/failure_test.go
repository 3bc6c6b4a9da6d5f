package proxyquit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/httpstream"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/istio-aux/istio-aux/pkg/names"
)

// execGR and wrapExec: an exec error as the remote execer returns it.
var execGR = schema.GroupResource{Resource: "pods/exec"}

func wrapExec(err error) error {
	return fmt.Errorf(`exec ["pilot-agent"] in ns/p container istio-proxy: %w`, err)
}

func TestFinalFailure(t *testing.T) {
	cases := map[string]struct {
		err    error
		reason string
		final  bool
	}{
		"exit code":                {wrapExec(utilexec.CodeExitError{Err: errors.New("command terminated with exit code 255"), Code: 255}), names.FinalExitCode, true},
		"killed by a signal":       {wrapExec(utilexec.CodeExitError{Err: errors.New("command terminated with exit code 137"), Code: 137}), names.FinalExitCode, false},
		"policy denial over SPDY":  {wrapExec(apierrors.NewForbidden(execGR, "p", errors.New("denied"))), names.FinalDenied, true},
		"policy denial over WS":    {wrapExec(&httpstream.UpgradeFailureError{Cause: apierrors.NewForbidden(execGR, "p", errors.New("denied"))}), names.FinalDenied, true},
		"no such container":        {wrapExec(apierrors.NewBadRequest("container istio-proxy is not valid for pod p")), names.FinalRejected, true},
		"policy as Invalid":        {wrapExec(apierrors.NewInvalid(schema.GroupKind{Kind: "PodExecOptions"}, "p", nil)), names.FinalRejected, true},
		"runc: no pilot-agent":     {wrapExec(errors.New(`Internal error occurred: error executing command in container: failed to exec in container: failed to start exec "x": OCI runtime exec failed: exec failed: unable to start container process: exec: "pilot-agent": executable file not found in $PATH: unknown`)), names.FinalNotFound, true},
		"crun: no pilot-agent":     {wrapExec(errors.New("executable file `pilot-agent` not found in $PATH: No such file or directory")), names.FinalNotFound, true},
		"deadline":                 {wrapExec(context.DeadlineExceeded), "", false},
		"throttled":                {wrapExec(apierrors.NewTooManyRequests("slow down", 1)), "", false},
		"API server unavailable":   {wrapExec(apierrors.NewServiceUnavailable("etcd")), "", false},
		"kubelet unreachable":      {wrapExec(apierrors.NewInternalError(errors.New("error dialing backend: dial tcp 10.0.0.1:10250: connect: connection refused"))), "", false},
		"stream cut":               {wrapExec(io.ErrUnexpectedEOF), "", false},
		"WebSocket without status": {wrapExec(&httpstream.UpgradeFailureError{Cause: errors.New("bad handshake")}), "", false},
	}
	for name, tc := range cases {
		reason, final := finalFailure(tc.err)
		if reason != tc.reason || final != tc.final {
			t.Errorf("%s: finalFailure = %q, %v; want %q, %v", name, reason, final, tc.reason, tc.final)
		}
	}
}

// TestQuitMayBeUnderWay: which exec errors leave open that the proxy is
// stopping, so that the function watches the pod for its stop and, failing
// to see it, keeps the quit's Event for the redelivery. The runtime's
// refusal of an exec into a stopped container says the proxy has stopped,
// however the API server passes it on.
func TestQuitMayBeUnderWay(t *testing.T) {
	cases := map[string]struct {
		err  error
		want bool
	}{
		"killed with its container":       {wrapExec(utilexec.CodeExitError{Err: errors.New("command terminated with exit code 137"), Code: 137}), true},
		"exited on its own":               {wrapExec(utilexec.CodeExitError{Err: errors.New("command terminated with exit code 3"), Code: 3}), false},
		"Envoy refused":                   {wrapExec(utilexec.CodeExitError{Err: errors.New("command terminated with exit code 255"), Code: 255}), false},
		"deadline":                        {wrapExec(context.DeadlineExceeded), true},
		"stream cut":                      {wrapExec(io.ErrUnexpectedEOF), true},
		"policy denial":                   {wrapExec(&httpstream.UpgradeFailureError{Cause: apierrors.NewForbidden(execGR, "p", errors.New("denied"))}), false},
		"kubelet unreachable":             {wrapExec(apierrors.NewInternalError(errors.New("error dialing backend: dial tcp 10.0.0.1:10250: connect: connection refused"))), false},
		"WebSocket without status":        {wrapExec(&httpstream.UpgradeFailureError{Cause: errors.New("bad handshake")}), false},
		"no pilot-agent":                  {wrapExec(errors.New(`OCI runtime exec failed: exec failed: unable to start container process: exec: "pilot-agent": executable file not found in $PATH: unknown`)), false},
		"containerd: exited, upgrade":     {wrapExec(&httpstream.UpgradeFailureError{Cause: errors.New("unable to upgrade connection: container is in CONTAINER_EXITED state")}), true},
		"containerd: exited, as a status": {wrapExec(apierrors.NewInternalError(errors.New("error executing command in container: container is in CONTAINER_EXITED state"))), true},
		"CRI-O: not running":              {wrapExec(apierrors.NewInternalError(errors.New("error executing command in container: container is not created or running"))), true},
		"runc: stopped under the exec":    {wrapExec(errors.New("OCI runtime exec failed: exec failed: cannot exec in a stopped state: unknown")), true},
		"containerd: task gone":           {wrapExec(errors.New("failed to exec in container: failed to load task: no running task found: task abc not found: not found")), true},
	}
	for name, tc := range cases {
		if got := quitMayBeUnderWay(tc.err); got != tc.want {
			t.Errorf("%s: quitMayBeUnderWay = %v, want %v", name, got, tc.want)
		}
	}
}
