// Command pilot-agent is a stand-in for Istio's pilot-agent inside kwok's
// fake pods. kwok runs it (first on kwok's PATH) for `kubectl exec` into any
// container; a per-pod kwok Exec gives it POD_NAME and POD_NAMESPACE.
//
// `pilot-agent request POST quitquitquit` records the quit (one JSON line in
// $ISTIO_AUX_TEST_QUIT_RECORD, read by tests and benchmarks) and then marks
// the pod with the test.istio-aux.dev/proxy-quit annotation, on which a kwok
// Stage terminates istio-proxy with exit code 0, as Envoy and pilot-agent do
// after a real quitquitquit. `pilot-agent wait` succeeds at once.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/istio-aux/istio-aux/test/cluster"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "pilot-agent:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	switch {
	case len(args) >= 1 && args[0] == "wait":
		return nil
	case len(args) == 3 && args[0] == "request" && strings.EqualFold(args[1], "POST") &&
		strings.TrimPrefix(args[2], "/") == "quitquitquit":
		return quit(args)
	}
	return fmt.Errorf("unsupported command %q", strings.Join(args, " "))
}

func quit(args []string) error {
	q := cluster.Quit{
		Namespace: os.Getenv("POD_NAMESPACE"),
		Name:      os.Getenv("POD_NAME"),
		UID:       os.Getenv("POD_UID"),
		Args:      append([]string{"pilot-agent"}, args...),
		Time:      time.Now().UTC(),
	}
	if q.Namespace == "" || q.Name == "" {
		return fmt.Errorf("POD_NAMESPACE and POD_NAME must be set (by the harness's per-pod kwok Exec)")
	}
	if err := record(q); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, cluster.AnnotationProxyQuit, q.Time.Format(time.RFC3339Nano))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := client.CoreV1().Pods(q.Namespace).Patch(ctx, q.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "pilot-agent-stub"}); err != nil {
		return fmt.Errorf("marking pod %s/%s quit: %w", q.Namespace, q.Name, err)
	}
	// What Envoy's admin endpoint answers.
	fmt.Println("OK")
	return nil
}

// record appends one line; O_APPEND keeps concurrent stubs' lines whole.
func record(q cluster.Quit) error {
	path := os.Getenv(cluster.EnvQuitRecord)
	if path == "" {
		return nil
	}
	line, err := json.Marshal(q)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("quit record: %w", err)
	}
	_, err = f.Write(append(line, '\n'))
	return errors.Join(err, f.Close())
}
