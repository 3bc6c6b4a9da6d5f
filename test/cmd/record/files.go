package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"

	"github.com/istio-aux/istio-aux/pkg/podevent"
	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/istio"
	"github.com/istio-aux/istio-aux/test/record"
)

// readBridgeDir reads the bridge's record mode files
// (<6-digit seq>-<namespace>-<pod>.json) in order, by namespace.
func readBridgeDir(dir string) (map[string][]cloudevents.Event, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	slices.Sort(files)
	out := map[string][]cloudevents.Event{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var e cloudevents.Event
		if err := json.Unmarshal(b, &e); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		ns, _ := e.Extensions()[podevent.ExtNamespace].(string)
		out[ns] = append(out[ns], e)
	}
	return out, nil
}

// writeFolder replaces a folder's recording: NNN-<pod>-<state>.json files in
// order, and SOURCE.
func writeFolder(dir string, sc scenario, f format, evs []cloudevents.Event) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	old, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return err
	}
	for _, o := range old {
		if err := os.Remove(o); err != nil {
			return err
		}
	}
	for i, e := range evs {
		p, err := podevent.Decode(e)
		if err != nil {
			return fmt.Errorf("%s event %d: %w", dir, i+1, err)
		}
		b, err := json.MarshalIndent(e, "", "  ")
		if err != nil {
			return err
		}
		name := record.FileName(i+1, p.Name, record.State(p, e.Type()))
		if err := os.WriteFile(filepath.Join(dir, name), append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, "SOURCE"), []byte(source(sc, f)), 0o644)
}

func source(sc scenario, f format) string {
	var b strings.Builder
	fmt.Fprintf(&b, "recorded by hack/record.sh (go run ./test/cmd/record) on %s\n\n", time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "scenario: %s\n", sc.what)
	switch f {
	case bridgeFormat:
		b.WriteString("format: what the bridge publishes (dev.istio-aux.pod.updated, slim pod), written by the bridge's own\n" +
			"  watcher and filter run with every state change published to a recorder (test/record.Recorder), in publish order\n")
	default:
		b.WriteString("format: what a Knative ApiServerSource (Resource mode, pods) delivers: every add/update/delete\n" +
			"  seen by a dynamic pod informer as dev.knative.apiserver.resource.*, full pod JSON, in order\n")
	}
	var pods []string
	for _, p := range sc.pods {
		pods = append(pods, p.Name)
	}
	fmt.Fprintf(&b, "pods: %s\n", strings.Join(pods, ", "))
	if sc.node {
		b.WriteString("run: kube-apiserver, etcd and the kubelet " + cluster.K8sVersion + " built from source, a real node (containerd,\n" +
			"  runc) in a network namespace, istiod as the sidecar injector (test/istio, istio.io/istio " + istio.Version + "),\n" +
			"  the real pilot-agent with the Envoy stand-in in " + istio.ProxyImage + ", istio-aux's real webhook and bridge\n" +
			"  (embedded NATS, proxy-quit in-process, exec through the kubelet)\n")
	} else {
		b.WriteString("run: kube-apiserver and etcd " + cluster.K8sVersion + " built from source, kwok " + cluster.KwokVersion +
			" with the Stages in test/kwok,\n  istiod as the sidecar injector (test/istio, istio.io/istio " + istio.Version + ", proxy " + istio.ProxyImage +
			"), istio-aux's real webhook and bridge\n  (embedded NATS, proxy-quit in-process; kwok runs the stub pilot-agent on exec)\n")
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		fmt.Fprintf(&b, "built with: %s\n", bi.GoVersion)
	}
	b.WriteString("file names: NNN-<pod>-<state>, state as test/record.State names it\n")
	b.WriteString("varies between recordings: uids, resourceVersions, timestamps, ids, pod IPs\n")
	return b.String()
}
