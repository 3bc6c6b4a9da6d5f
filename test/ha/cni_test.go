//go:build e2e

package ha

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/istio-aux/istio-aux/kubectl/explain"
	"github.com/istio-aux/istio-aux/pkg/names"
	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/istio"
	"github.com/istio-aux/istio-aux/test/istioaux"
	"github.com/istio-aux/istio-aux/test/mesh"
	"github.com/istio-aux/istio-aux/test/poll"
)

// TestHACNIStartRace: Istio CNI's start race on a node that comes back. On
// three nodes with Istio's CNI node agent (mesh.HACNI), one node is
// powered off and Jobs are placed on it while the cluster still takes it
// for Ready; then it is powered on. Its pod network is written afresh as it
// boots (without Istio's plugin, until its agent chains it in again), and
// the kubelet starts the Jobs' pods beside the agent's own, so some pods
// may get their sandbox before the plugin is chained in: no traffic
// capture, istio-validation exits 126. A Never pod then fails and its Job
// makes another; an OnFailure pod would have istio-validation run again in
// the same sandbox, every run counted toward the Job's backoffLimit, and
// istio-aux deletes it (a PodReplaced Event) so that its Job makes another
// (docs/faults.md, "Istio CNI's start race", has the table of a run). The
// test records what happened to every Job and pod and asserts what a user
// needs: every Job completes (none left Running, none failed), every app
// that ran had its proxy quit exactly once, no pod whose apps never ran
// was quit, and explain names the cause on each pod that met the race.
func TestHACNIStartRace(t *testing.T) {
	shared.Use(t, mesh.HACNI)
	t.Logf("cluster: %s", mesh.ShapeOf(mesh.HACNI))
	m, _ := installedAs(t, istioaux.Config)
	c := m.Cluster
	ctx := context.Background()
	ns := mesh.Namespace(t, c, "", true, mesh.OptedIn)
	node := m.Nodes.Names()[2]
	n := m.Nodes.Node(node)

	start := time.Now()
	if err := n.PowerOff(); err != nil {
		t.Fatal(err)
	}
	// Jobs for the node, made while the control plane still takes it for
	// Ready (it notices after node-monitor-grace-period, 50 s).
	const per = 3
	var jobs []string
	for i := range per {
		for _, policy := range []corev1.RestartPolicy{corev1.RestartPolicyNever, corev1.RestartPolicyOnFailure} {
			name := fmt.Sprintf("%s-%d", strings.ToLower(string(policy)), i)
			j := mesh.TrainingJob(name, 1, policy, mesh.App{}, nil)
			j.Spec.BackoffLimit = ptr.To(int32(3))
			j.Spec.Template.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
			mesh.CreateJob(t, c, ns, j)
			jobs = append(jobs, name)
		}
	}
	// Every Job has its pod before the node boots: bound to it while the
	// cluster takes it for Ready, or waiting for it once it does not.
	poll.Eventually(t, 90*time.Second, "every Job's pod made for "+node, func(ctx context.Context) (bool, error) {
		for _, j := range jobs {
			pods, err := mesh.JobPods(ctx, c.Client(), ns, j)
			if err != nil || len(pods) == 0 {
				return false, err
			}
		}
		return true, nil
	})
	off := time.Since(start)
	if err := n.PowerOn(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s powered off for %s, its Jobs' pods made, powered on", node, off.Round(time.Second))

	// Every Job's end, Complete or Failed, before any verdict: the table
	// is what happened to all of them.
	ended := map[string]*batchv1.Job{}
	for _, j := range jobs {
		ended[j] = mesh.WaitJobEnd(t, c, ns, j, 6*time.Minute)
	}
	raced, repaired, replaced := 0, 0, 0
	for _, j := range jobs {
		t.Logf("%s: %s, %d pod(s) failed", j, jobEnd(ended[j]), ended[j].Status.Failed)
		for _, p := range mesh.Pods(t, c, ns, j) {
			v := cluster.ContainerStatus(&p, "istio-validation")
			hit := v.LastTerminationState.Terminated != nil && v.LastTerminationState.Terminated.ExitCode == 126 ||
				v.State.Terminated != nil && v.State.Terminated.ExitCode == 126
			app := cluster.ContainerStatus(&p, "tensorflow")
			ran := app.State.Terminated != nil || app.State.Running != nil || app.RestartCount > 0
			quits := mesh.CountEvents(mesh.Events(t, c, ns, p.Name), "ProxyQuit")
			t.Logf("%s/%s: phase %s, istio-validation restarts %d (126 seen: %t), app ran: %t, ProxyQuit Events %d",
				j, p.Name, p.Status.Phase, v.RestartCount, hit, ran, quits)
			if hit {
				raced++
				explain := explainPod(t, c, ns, p.Name)
				if !strings.Contains(explain, "Istio CNI had not set up the pod's traffic capture") {
					t.Errorf("%s: explain does not name the CNI start race:\n%s", p.Name, explain)
				}
				if p.Status.Phase == corev1.PodFailed {
					replaced++
				} else {
					repaired++
				}
			}
			switch {
			case ran && p.Status.Phase == corev1.PodSucceeded:
				mesh.OneEvent(t, c, ns, p.Name, "ProxyQuit")
			case !ran && quits > 0:
				t.Errorf("%s: quit %d times though no app ran", p.Name, quits)
			}
		}
	}
	// The pods istio-aux deleted are gone; their PodReplaced Events stay.
	evs, err := c.Client().CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=" + names.ReasonPodReplaced})
	if err != nil {
		t.Fatal(err)
	}
	deleted := map[string]bool{}
	for _, e := range evs.Items {
		t.Logf("%s %s: %s", e.Reason, e.InvolvedObject.Name, e.Message)
		if deleted[e.InvolvedObject.Name] {
			t.Errorf("%s replaced twice", e.InvolvedObject.Name)
		}
		deleted[e.InvolvedObject.Name] = true
	}
	t.Logf("CNI start race: %d of the pods left met it (%d set up by the repair controller, %d failed and replaced by their Job), %d deleted by istio-aux for their Job to replace; %d Jobs ended %s after the power-off",
		raced, repaired, replaced, len(deleted), len(jobs), time.Since(start).Round(time.Second))
	if ds, err := c.Client().AppsV1().DaemonSets(istio.Namespace).Get(ctx, istio.CNIDaemonSet, metav1.GetOptions{}); err == nil {
		t.Logf("istio-cni-node: %d of %d ready", ds.Status.NumberReady, ds.Status.DesiredNumberScheduled)
	}
	for _, j := range jobs {
		if !mesh.JobHas(ended[j], batchv1.JobComplete) {
			t.Errorf("%s: %s, want Complete: a Job the CNI start race failed", j, jobEnd(ended[j]))
		}
	}
}

// jobEnd names the Job's end and its reason: "Complete", "Failed
// (BackoffLimitExceeded)".
func jobEnd(j *batchv1.Job) string {
	for _, cond := range j.Status.Conditions {
		if cond.Status == corev1.ConditionTrue && (cond.Type == batchv1.JobComplete || cond.Type == batchv1.JobFailed) {
			if cond.Reason != "" {
				return fmt.Sprintf("%s (%s)", cond.Type, cond.Reason)
			}
			return string(cond.Type)
		}
	}
	return "not ended"
}

// explainPod is what kubectl istio-aux explain finds wrong with the pod
// (its problems), from the plugin's own code.
func explainPod(t *testing.T, c *cluster.Cluster, ns, pod string) string {
	t.Helper()
	src := explain.Source{Client: c.Client(), SystemNamespace: istioaux.SystemNamespace, Now: time.Now}
	r, err := src.Report(context.Background(), explain.Selection{Namespace: ns, Names: []string{pod}})
	if err != nil || len(r.Pods) != 1 {
		t.Fatalf("explain %s/%s: %v", ns, pod, err)
	}
	return strings.Join(r.Pods[0].Problems, "\n")
}
