package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/istio-aux/istio-aux/pkg/podevent"
	"github.com/istio-aux/istio-aux/test/mesh"
	"github.com/istio-aux/istio-aux/test/poll"
	"github.com/istio-aux/istio-aux/test/realnode"
	"github.com/istio-aux/istio-aux/test/record"
)

// run starts everything, runs the scenarios side by side, stops everything
// and only then rewrites the folders, so a failed run leaves testdata as it
// was.
func run(ctx context.Context, out string, scs []scenario) error {
	logf, err := os.CreateTemp("", "istio-aux-record-*.log")
	if err != nil {
		return err
	}
	defer logf.Close()
	step("process logs: %s", logf.Name())
	bridgeDir, err := os.MkdirTemp("", "istio-aux-record-bridge-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(bridgeDir)

	// kwok's scenarios, then the real node's (those kwok's Stages cannot
	// imitate: the kubelet's container-level restarts).
	recorded := map[string][]cloudevents.Event{}
	for _, node := range []bool{false, true} {
		group := slices.DeleteFunc(slices.Clone(scs), func(sc scenario) bool { return sc.node != node })
		if len(group) == 0 {
			continue
		}
		if why := realnode.NodeUnavailable(); node && why != "" {
			return fmt.Errorf("the real node's scenarios need a real node: %s", why)
		}
		got, err := runScenarios(ctx, logf, bridgeDir, group, node)
		if err != nil {
			return err
		}
		maps.Copy(recorded, got)
	}
	for _, sc := range scs {
		for folder, f := range sc.folders {
			if err := writeFolder(filepath.Join(out, folder), sc, f, recorded[folder]); err != nil {
				return err
			}
			step("wrote %s: %d events", filepath.Join(out, folder), len(recorded[folder]))
		}
	}
	return nil
}

func step(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s  "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
}

// runScenarios returns the events recorded per folder.
func runScenarios(ctx context.Context, log io.Writer, bridgeDir string, scs []scenario, node bool) (_ map[string][]cloudevents.Event, err error) {
	start := time.Now()
	m, err := mesh.Start(ctx, mesh.Options{Node: node, IstioAux: true, Log: log})
	if err != nil {
		return nil, err
	}
	defer func() {
		// knative's webhook drains for longer than Stop waits and is
		// killed; that loses nothing recorded, so it is only reported.
		if err := m.Stop(); err != nil {
			step("stopping: %v", err)
		}
	}()
	c := m.Cluster
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	src, err := watchPods(wctx, c.RESTConfig())
	if err != nil {
		return nil, err
	}
	if err := recordBridgeEvents(wctx, c.RESTConfig(), bridgeDir); err != nil {
		return nil, err
	}
	step("cluster, istiod, webhook and bridge up in %s", time.Since(start).Round(time.Millisecond))

	errs := make(chan error, len(scs))
	for _, sc := range scs {
		go func() { errs <- runScenario(ctx, c.Client(), src, sc) }()
	}
	var all []error
	for range scs {
		all = append(all, <-errs)
	}
	if err := errors.Join(all...); err != nil {
		return nil, err
	}
	step("scenarios done in %s", time.Since(start).Round(time.Millisecond))

	bridgeEvents, err := readBridgeDir(bridgeDir)
	if err != nil {
		return nil, err
	}
	recorded := map[string][]cloudevents.Event{}
	for _, sc := range scs {
		for folder, f := range sc.folders {
			var evs []cloudevents.Event
			if f == bridgeFormat {
				evs = bridgeEvents[sc.namespace]
			} else if evs, err = src.inNamespace(sc.namespace); err != nil {
				return nil, err
			}
			if len(evs) == 0 {
				return nil, fmt.Errorf("scenario %s: no %s events recorded", sc.namespace, f)
			}
			recorded[folder] = evs
		}
	}
	return recorded, nil
}

// runScenario creates the namespace and pods and waits until the
// ApiServerSource stand-in has seen every pod end (Succeeded, Failed or
// deleted), which is also after the bridge published its last event for
// it (the quit is triggered by that event).
func runScenario(ctx context.Context, cs kubernetes.Interface, src *apiServerSource, sc scenario) error {
	if err := mesh.CreateNamespace(ctx, cs, sc.namespace, sc.nsLabels); err != nil {
		return fmt.Errorf("scenario %s: %w", sc.namespace, err)
	}
	for _, p := range sc.pods {
		if _, err := cs.CoreV1().Pods(sc.namespace).Create(ctx, p.DeepCopy(), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("scenario %s: creating pod %s: %w", sc.namespace, p.Name, err)
		}
	}
	deleted := map[string]bool{}
	err := poll.Until(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		evs, err := src.inNamespace(sc.namespace)
		if err != nil {
			return false, poll.Permanent(err)
		}
		last := map[string]string{}
		for _, e := range evs {
			p, err := podevent.Decode(e)
			if err != nil {
				return false, poll.Permanent(err)
			}
			last[p.Name] = record.State(p, e.Type())
		}
		done := 0
		for _, p := range sc.pods {
			switch st := last[p.Name]; {
			case st == record.StateDeleted || (!sc.deleteRunning && (st == record.StateSucceeded || st == record.StateFailed)):
				done++
			case sc.deleteRunning && !deleted[p.Name] && appsRunning(st):
				if err := cs.CoreV1().Pods(sc.namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
					return false, err
				}
				deleted[p.Name] = true
			}
		}
		return done == len(sc.pods), nil
	})
	if err != nil {
		return fmt.Errorf("scenario %s: pods did not end: %w", sc.namespace, err)
	}
	step("scenario %s: done", sc.namespace)
	return nil
}

// appsRunning: every container runs and is ready ("2of2").
func appsRunning(state string) bool {
	var ready, total int
	n, err := fmt.Sscanf(state, "%dof%d", &ready, &total)
	return err == nil && n == 2 && ready == total
}
