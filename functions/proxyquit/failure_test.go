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

func TestFinalFailure(t *testing.T) {
	gr := schema.GroupResource{Resource: "pods/exec"}
	wrap := func(err error) error {
		return fmt.Errorf(`exec ["pilot-agent"] in ns/p container istio-proxy: %w`, err)
	}
	cases := map[string]struct {
		err    error
		reason string
		final  bool
	}{
		"exit code":                {wrap(utilexec.CodeExitError{Err: errors.New("command terminated with exit code 255"), Code: 255}), names.FinalExitCode, true},
		"policy denial over SPDY":  {wrap(apierrors.NewForbidden(gr, "p", errors.New("denied"))), names.FinalDenied, true},
		"policy denial over WS":    {wrap(&httpstream.UpgradeFailureError{Cause: apierrors.NewForbidden(gr, "p", errors.New("denied"))}), names.FinalDenied, true},
		"no such container":        {wrap(apierrors.NewBadRequest("container istio-proxy is not valid for pod p")), names.FinalRejected, true},
		"policy as Invalid":        {wrap(apierrors.NewInvalid(schema.GroupKind{Kind: "PodExecOptions"}, "p", nil)), names.FinalRejected, true},
		"runc: no pilot-agent":     {wrap(errors.New(`Internal error occurred: error executing command in container: failed to exec in container: failed to start exec "x": OCI runtime exec failed: exec failed: unable to start container process: exec: "pilot-agent": executable file not found in $PATH: unknown`)), names.FinalNotFound, true},
		"crun: no pilot-agent":     {wrap(errors.New("executable file `pilot-agent` not found in $PATH: No such file or directory")), names.FinalNotFound, true},
		"deadline":                 {wrap(context.DeadlineExceeded), "", false},
		"throttled":                {wrap(apierrors.NewTooManyRequests("slow down", 1)), "", false},
		"API server unavailable":   {wrap(apierrors.NewServiceUnavailable("etcd")), "", false},
		"kubelet unreachable":      {wrap(apierrors.NewInternalError(errors.New("error dialing backend: dial tcp 10.0.0.1:10250: connect: connection refused"))), "", false},
		"stream cut":               {wrap(io.ErrUnexpectedEOF), "", false},
		"WebSocket without status": {wrap(&httpstream.UpgradeFailureError{Cause: errors.New("bad handshake")}), "", false},
	}
	for name, tc := range cases {
		reason, final := finalFailure(tc.err)
		if reason != tc.reason || final != tc.final {
			t.Errorf("%s: finalFailure = %q, %v; want %q, %v", name, reason, final, tc.reason, tc.final)
		}
	}
}
