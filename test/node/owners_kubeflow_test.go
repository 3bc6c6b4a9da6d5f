//go:build e2e

package node

import (
	"context"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/images"
	"github.com/istio-aux/istio-aux/test/mesh"
	"github.com/istio-aux/istio-aux/test/operators"
)

// pytorchJob is a PyTorchJob as Kubeflow's examples write one (a master
// and a worker running `python -u train.py`), whose worker's first attempt
// fails at start (its attempts counted on an emptyDir): under OnFailure
// the kubelet runs it again in the same pod.
const pytorchJob = `apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: ddp
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: OnFailure
      template:
        spec:
          containers:
          - name: pytorch
            image: IMAGE
            command: [python, -u, train.py]
    Worker:
      replicas: 1
      restartPolicy: OnFailure
      template:
        spec:
          containers:
          - name: pytorch
            image: IMAGE
            command: [python, -u, train.py]
            env:
            - {name: APP_EXIT_CODES, value: "1,0"}
            - {name: APP_ATTEMPT_FILE, value: /attempts/count}
            volumeMounts: [{name: attempts, mountPath: /attempts}]
          volumes: [{name: attempts, emptyDir: {}}]
`

// TestOwnerPyTorchJob: the master and the worker (whose init container,
// the operator's, waits for the master's name) join each other; the
// worker's failed first attempt keeps its proxy (the kubelet will run it
// again), then both proxies are quit once, both pods Complete and the
// PyTorchJob is Succeeded.
func TestOwnerPyTorchJob(t *testing.T) {
	c, _ := meshCluster(t)
	withOperators(t, c, operators.TrainingOperator)
	t.Parallel()
	ns := mesh.Namespace(t, c, "", true, mesh.OptedIn)
	ctx := context.Background()
	submit(t, c, ns, fill(pytorchJob, "IMAGE", images.PythonRef))
	job, err := operators.WaitCondition(ctx, c, operators.PyTorchJobs, ns, "ddp", "Succeeded", 4*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if reason := operators.Conditions(job)["Succeeded"]; reason != "PyTorchJobSucceeded" {
		t.Errorf("PyTorchJob Succeeded with reason %q", reason)
	}
	// Succeeded follows the master; the worker completes on its own.
	pods, err := operators.WaitPods(ctx, c, ns, []string{"ddp-master-0", "ddp-worker-0"}, 2*time.Minute, operators.Completed)
	if err != nil {
		t.Fatal(err)
	}
	checkQuitOnce(t, c, ns, &pods[0], "pytorch", 0)
	checkQuitOnce(t, c, ns, &pods[1], "pytorch", 1)
	// One restart ending in exit 0 (checkQuitOnce) is the failed first
	// attempt under OnFailure. Its exit code is the kubelet's best effort:
	// it reads it off the dead container, which a kubelet may have removed
	// once the pod was done (seen on 1.32.13 with Istio CNI, 2026-12-02).
	if last := cluster.ContainerStatus(&pods[1], "pytorch").LastTerminationState.Terminated; last == nil {
		t.Logf("ddp-worker-0: the kubelet kept no last termination state (its first attempt's container is gone)")
	} else if last.ExitCode != 1 {
		t.Errorf("ddp-worker-0: last termination %+v, want the first attempt's exit 1", last)
	}
	// The operator's init container (with Istio CNI, after Istio's
	// istio-validation).
	if init := cluster.ContainerStatus(&pods[1], "init-pytorch"); init.State.Terminated == nil || init.State.Terminated.ExitCode != 0 {
		t.Errorf("ddp-worker-0: init containers %s, want the operator's init-pytorch done", mesh.Describe(pods[1].Status.InitContainerStatuses))
	}
	for _, p := range pods {
		checkJoined(t, c, ns, p.Name, "pytorch")
	}
}

// trainJob is a TrainJob on the torch-distributed runtime Trainer ships,
// two nodes running `python -u train.py`.
const trainJob = `apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata:
  name: train
spec:
  runtimeRef:
    apiGroup: trainer.kubeflow.org
    kind: ClusterTrainingRuntime
    name: torch-distributed
  trainer:
    image: IMAGE
    command: [python, -u, train.py]
    numNodes: 2
`

// TestOwnerTrainJob: Trainer makes a JobSet, JobSet an indexed Job, the
// Job controller its two pods; they join each other through the JobSet's
// headless Service, each proxy is quit once, the Job is Complete, the
// JobSet Completed and the TrainJob Complete.
func TestOwnerTrainJob(t *testing.T) {
	c, _ := meshCluster(t)
	withOperators(t, c, operators.JobSet, operators.Trainer)
	t.Parallel()
	ns := mesh.Namespace(t, c, "", true, mesh.OptedIn)
	ctx := context.Background()
	submit(t, c, ns, fill(trainJob, "IMAGE", images.PythonRef))
	tj, err := operators.WaitCondition(ctx, c, operators.TrainJobs, ns, "train", "Complete", 4*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("TrainJob conditions: %v", operators.Conditions(tj))
	if _, err := operators.WaitCondition(ctx, c, operators.JobSets, ns, "train", "Completed", time.Minute); err != nil {
		t.Error(err)
	}
	j := mesh.WaitJob(t, c, ns, "train-node-0", batchv1.JobComplete, time.Minute)
	if j.Status.Succeeded != 2 {
		t.Errorf("Job train-node-0: %d succeeded, want 2", j.Status.Succeeded)
	}
	pods := podsOf(t, c, ns, "jobset.sigs.k8s.io/jobset-name=train")
	if len(pods) != 2 {
		t.Fatalf("%d pods of the JobSet, want 2", len(pods))
	}
	for _, p := range pods {
		if p.Status.Phase != corev1.PodSucceeded {
			t.Errorf("%s: phase %s", p.Name, p.Status.Phase)
		}
		checkQuitOnce(t, c, ns, &p, "node", 0)
		checkJoined(t, c, ns, p.Name, "node")
		if running(&p, keys.ProxyContainer) {
			t.Errorf("%s: proxy still running", p.Name)
		}
	}
}
