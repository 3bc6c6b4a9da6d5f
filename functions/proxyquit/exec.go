package proxyquit

import (
	"bytes"
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/istio-aux/istio-aux/internal/kube"
)

// Execer runs a command in a container of a pod and returns its output.
// A non-nil error means the command did not run to a zero exit.
type Execer interface {
	Exec(ctx context.Context, namespace, pod, container string, argv []string) (ExecOutput, error)
}

// ExecOutput is the (bounded) output of one exec.
type ExecOutput struct {
	Stdout, Stderr string
}

// maxOutput bounds what is kept of each stream: the quit command prints a
// line or two, and a misbehaving one must not grow the function's memory.
const maxOutput = 4 << 10

// RemoteExecer execs through the API server's pods/exec subresource, like
// kubectl exec: WebSocket first (RBAC verb get), SPDY when the upgrade is
// refused (verb create), so it works against old and new API servers.
type RemoteExecer struct {
	config *rest.Config
	client rest.Interface
}

// NewRemoteExecer builds an Execer for the cluster rc points at.
func NewRemoteExecer(rc *rest.Config) (*RemoteExecer, error) {
	kc, err := kube.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("creating the exec client: %w", err)
	}
	return &RemoteExecer{config: rc, client: kc.RESTClient()}, nil
}

// Exec implements Execer. ctx bounds the whole exec, connection included.
func (r *RemoteExecer) Exec(ctx context.Context, namespace, pod, container string, argv []string) (ExecOutput, error) {
	u := r.client.Post().Resource("pods").Namespace(namespace).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{
			Container: container,
			Command:   argv,
			Stdout:    true,
			Stderr:    true,
		}, kube.ParameterCodec).URL()
	spdy, err := remotecommand.NewSPDYExecutor(r.config, "POST", u)
	if err != nil {
		return ExecOutput{}, fmt.Errorf("creating the SPDY executor: %w", err)
	}
	// RFC 6455 requires GET for the WebSocket handshake.
	ws, err := remotecommand.NewWebSocketExecutor(r.config, "GET", u.String())
	if err != nil {
		return ExecOutput{}, fmt.Errorf("creating the WebSocket executor: %w", err)
	}
	exec, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return ExecOutput{}, fmt.Errorf("creating the exec executor: %w", err)
	}
	var stdout, stderr boundedBuffer
	err = exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
	out := ExecOutput{Stdout: stdout.String(), Stderr: stderr.String()}
	if err != nil {
		return out, fmt.Errorf("exec %q in %s/%s container %s: %w", argv, namespace, pod, container, err)
	}
	return out, nil
}

// boundedBuffer keeps the first maxOutput bytes written and discards the
// rest while still reporting success, so the stream is drained.
type boundedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := maxOutput - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

func (b *boundedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
