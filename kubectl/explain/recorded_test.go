package explain_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"knative.dev/pkg/logging"

	"github.com/istio-aux/istio-aux/functions/proxyquit"
	"github.com/istio-aux/istio-aux/pkg/names"
	"github.com/istio-aux/istio-aux/pkg/podevent"
	"github.com/istio-aux/istio-aux/pkg/slim"
)

// recorded is the message of the Event the proxy-quit function itself
// records when its exec of the quit fails with execErr, so that explain is
// tested on the function's words, not on a copy of them.
func recorded(t *testing.T, execErr error) string {
	t.Helper()
	ns := namespace("jobs", optedIn, created)
	pod := jobPod("jobs", "done", corev1.RestartPolicyNever, exited(0, 0))
	rec := record.NewFakeRecorder(4)
	f, err := proxyquit.New(proxyquit.DefaultConfig(), cluster{pod, ns}, failing{execErr}, rec, nil)
	if err != nil {
		t.Fatal(err)
	}
	e, err := podevent.New("test", slim.Of(pod))
	if err != nil {
		t.Fatal(err)
	}
	f.Handle(logging.WithLogger(context.Background(), zap.NewNop().Sugar()), e)
	select {
	case got := <-rec.Events:
		prefix := "Warning " + names.ReasonProxyQuitFailed + " "
		if !strings.HasPrefix(got, prefix) {
			t.Fatalf("the function recorded %q, want a %s", got, names.ReasonProxyQuitFailed)
		}
		return strings.TrimPrefix(got, prefix)
	default:
		t.Fatal("the function recorded no Event")
		return ""
	}
}

// cluster is the live pod and namespace the function reads.
type cluster struct {
	pod *corev1.Pod
	ns  *corev1.Namespace
}

func (c cluster) Pod(context.Context, string, string, string) (*corev1.Pod, error) { return c.pod, nil }
func (c cluster) Namespace(context.Context, string) (*corev1.Namespace, error)     { return c.ns, nil }
func (c cluster) Node(context.Context, string) (*corev1.Node, error)               { return &corev1.Node{}, nil }
func (c cluster) DeletePod(context.Context, string, string, types.UID, string) error {
	return errors.New("explain's tests delete no pod")
}

// failing is an exec that fails with err.
type failing struct{ err error }

func (f failing) Exec(context.Context, string, string, string, []string) (proxyquit.ExecOutput, error) {
	return proxyquit.ExecOutput{}, f.err
}
