package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/mesh"
	"github.com/istio-aux/istio-aux/test/operators"
)

// tfjobStory is the seed's README on the real node: the Kubeflow training
// operator installed from its module, its TFJob `mnist` (only the image
// differs) created in a namespace with Istio's injection on, stuck with its
// proxies running; deleted, the namespace labelled
// io.datastrophic/istio-aux=enabled, created again, until it Succeeds.
func tfjobStory(ctx context.Context, c *cluster.Cluster, log io.Writer, step func(string, ...any)) error {
	step("installing the Kubeflow training operator %s from its Go module (CRDs, RBAC, webhook; image built by hack/build-operators.sh)", operators.TrainingOperatorVersion)
	if err := operators.Install(ctx, c, log, operators.TrainingOperator); err != nil {
		return err
	}
	if err := mesh.CreateNamespace(ctx, c.Client(), demoNamespace, nil); err != nil {
		return err
	}
	step("kubectl label namespace %s istio-injection=enabled; kubectl create -f tfjob.yaml:\n%s", demoNamespace, operators.SeedTFJob)
	if err := operators.CreateWhenServed(ctx, c, demoNamespace, operators.SeedTFJob); err != nil {
		return err
	}
	err := timeline(ctx, c, step, 4*time.Minute, func(ctx context.Context) (bool, error) {
		return operators.PodsAre(ctx, c, demoNamespace, operators.SeedWorkers, operators.Stuck)
	})
	if err != nil {
		return fmt.Errorf("without istio-aux the workers did not get stuck as the seed describes: %w", err)
	}
	step("without istio-aux: both workers' training ended, their proxies keep them Running at 1/2: the TFJob never succeeds")
	pause(ctx, 5*time.Second)
	step("kubectl delete -f tfjob.yaml; kubectl label namespace %s %s; kubectl create -f tfjob.yaml", demoNamespace, operators.SeedOptIn)
	if err := operators.DeleteSeed(ctx, c, demoNamespace); err != nil {
		return err
	}
	if _, err := operators.Kubectl(ctx, c, nil, "label", "namespace", demoNamespace, operators.SeedOptIn); err != nil {
		return err
	}
	if err := operators.CreateWhenServed(ctx, c, demoNamespace, operators.SeedTFJob); err != nil {
		return err
	}
	return timeline(ctx, c, step, 4*time.Minute, func(ctx context.Context) (bool, error) {
		tf, err := operators.Get(ctx, c, operators.TFJobs, demoNamespace, "mnist")
		if err != nil {
			return false, err
		}
		if operators.Conditions(tf)["Succeeded"] == "" {
			return false, nil
		}
		if done, err := operators.PodsAre(ctx, c, demoNamespace, operators.SeedWorkers, operators.Completed); !done {
			return false, err
		}
		step("TFJob mnist Succeeded, every pod Completed")
		return true, nil
	})
}

// pause gives the reader a moment, or ends at Ctrl-C.
func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
