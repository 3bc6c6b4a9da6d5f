//go:build e2e

package node

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/mesh"
	"github.com/istio-aux/istio-aux/test/poll"
)

// The Job controller's own owners and shapes, as users write them: a
// CronJob, an indexed Job with a backoff limit per index, and a Job whose
// pod failure policy ignores one exit code. Each of the last two needs a
// failed pod to reach phase Failed before the Job controller can count it
// (per index, or against the policy): with a classic sidecar that happens
// only once istio-aux quits the proxy.

// TestOwnerCronJob: a CronJob firing every minute makes a Job (the CronJob
// controller runs) whose pod's proxy istio-aux quits; the Job completes and
// the CronJob records the success.
func TestOwnerCronJob(t *testing.T) {
	c, _ := meshCluster(t)
	t.Parallel()
	ns := mesh.Namespace(t, c, "", true, mesh.OptedIn)
	ctx := context.Background()
	j := meshJob("", 1, corev1.RestartPolicyOnFailure, worker(nil))
	j.Spec.Template.Spec.ServiceAccountName = ""
	cj := &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: ns},
		Spec: batchv1.CronJobSpec{
			Schedule:          "* * * * *",
			ConcurrencyPolicy: batchv1.ForbidConcurrent,
			JobTemplate:       batchv1.JobTemplateSpec{Spec: j.Spec},
		},
	}
	if _, err := c.Client().BatchV1().CronJobs(ns).Create(ctx, cj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// It fires at the next whole minute; the Job then takes seconds.
	var last *batchv1.CronJob
	if err := poll.Until(ctx, 3*time.Minute, func(ctx context.Context) (bool, error) {
		var err error
		last, err = c.Client().BatchV1().CronJobs(ns).Get(ctx, "nightly", metav1.GetOptions{})
		return err == nil && last.Status.LastSuccessfulTime != nil, err
	}); err != nil {
		t.Fatalf("the CronJob recorded no success: %v (status %+v)", err, last.Status)
	}
	jobs, err := c.Client().BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	done := 0
	for _, job := range jobs.Items {
		if !mesh.JobHas(&job, batchv1.JobComplete) {
			continue
		}
		done++
		if owner := metav1.GetControllerOf(&job); owner == nil || owner.Kind != "CronJob" || owner.Name != "nightly" {
			t.Errorf("Job %s is not the CronJob's: owner %+v", job.Name, owner)
		}
		for _, p := range mesh.Pods(t, c, ns, job.Name) {
			mesh.OneEvent(t, c, ns, p.Name, "ProxyQuit")
		}
	}
	if done == 0 {
		t.Fatalf("no Job of the CronJob completed: %d Jobs", len(jobs.Items))
	}
}

// TestOwnerIndexedJob: an indexed Job of 3 with backoffLimitPerIndex 1,
// restartPolicy Never, whose every index fails its first pod (exit 1; its
// attempts counted per index on a volume) and passes the second: each
// failed pod's proxy is quit so the pod fails and the index is retried
// once, each retry's proxy is quit too, and the Job completes every index
// within its per-index limit.
func TestOwnerIndexedJob(t *testing.T) {
	c, _ := meshCluster(t)
	t.Parallel()
	ns := mesh.Namespace(t, c, "", true, mesh.OptedIn)
	claim(t, c, ns, "attempts")
	app := worker(map[string]string{"APP_EXIT_CODES": "1,0", "APP_RUN_FOR": "1s"})
	// The attempts of each index in a file of their own: INDEX comes first
	// so that the file name can refer to it.
	app.Env = append([]corev1.EnvVar{{Name: "INDEX", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
		FieldPath: "metadata.annotations['" + batchv1.JobCompletionIndexAnnotation + "']"}}}}, app.Env...)
	setEnv(&app, "APP_ATTEMPT_FILE", "/attempts/index-$(INDEX)")
	j := meshJob("indexed", 3, corev1.RestartPolicyNever, app)
	j.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
	j.Spec.BackoffLimit = nil
	j.Spec.BackoffLimitPerIndex = ptr.To(int32(1))
	onVolume(&j.Spec.Template.Spec, "attempts")
	mesh.CreateJob(t, c, ns, j)
	done := mesh.WaitJob(t, c, ns, "indexed", batchv1.JobComplete, 4*time.Minute)
	if done.Status.CompletedIndexes != "0-2" || done.Status.Failed != 3 || ptr.Deref(done.Status.FailedIndexes, "") != "" {
		t.Errorf("status: completed %q, failed pods %d, failed indexes %q; want 0-2, 3, none",
			done.Status.CompletedIndexes, done.Status.Failed, ptr.Deref(done.Status.FailedIndexes, ""))
	}
	perIndex := map[string][]string{}
	for _, p := range mesh.Pods(t, c, ns, "indexed") {
		idx := p.Annotations[batchv1.JobCompletionIndexAnnotation]
		app := terminated(&p, "tensorflow")
		if app == nil {
			t.Errorf("%s: app not terminated", p.Name)
			continue
		}
		perIndex[idx] = append(perIndex[idx], fmt.Sprintf("%s/%d/failures=%s", p.Status.Phase, app.ExitCode, p.Annotations[batchv1.JobIndexFailureCountAnnotation]))
		if s := terminated(&p, keys.ProxyContainer); s == nil {
			t.Errorf("%s: proxy not quit", p.Name)
		}
		mesh.OneEvent(t, c, ns, p.Name, "ProxyQuit")
	}
	want := []string{"Failed/1/failures=0", "Succeeded/0/failures=1"}
	for _, idx := range []string{"0", "1", "2"} {
		got := perIndex[idx]
		sort.Strings(got)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("index %s: pods %v, want %v", idx, got, want)
		}
	}
}

// TestOwnerPodFailurePolicy: a Job with backoffLimit 0 whose pod failure
// policy ignores exit code 42; its first pod exits 42 (restartPolicy
// Never), the proxy is quit so the pod fails, the policy ignores the
// failure, the Job controller makes a second pod (its attempt counted on
// a volume) which succeeds: the Job completes without a counted failure.
func TestOwnerPodFailurePolicy(t *testing.T) {
	c, _ := meshCluster(t)
	t.Parallel()
	ns := mesh.Namespace(t, c, "", true, mesh.OptedIn)
	claim(t, c, ns, "attempts")
	app := worker(map[string]string{"APP_EXIT_CODES": "42,0"}) // attempts in /attempts/count
	j := meshJob("policy", 1, corev1.RestartPolicyNever, app)
	j.Spec.BackoffLimit = ptr.To(int32(0))
	j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
		Action: batchv1.PodFailurePolicyActionIgnore,
		OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
			ContainerName: ptr.To("tensorflow"), Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{42}},
	}}}
	onVolume(&j.Spec.Template.Spec, "attempts")
	mesh.CreateJob(t, c, ns, j)
	done := mesh.WaitJob(t, c, ns, "policy", batchv1.JobComplete, 4*time.Minute)
	if done.Status.Failed != 0 || done.Status.Succeeded != 1 {
		t.Errorf("status: failed %d, succeeded %d; want the ignored failure uncounted and 1 success", done.Status.Failed, done.Status.Succeeded)
	}
	var phases []string
	for _, p := range mesh.Pods(t, c, ns, "policy") {
		app := terminated(&p, "tensorflow")
		if app == nil {
			t.Errorf("%s: app not terminated", p.Name)
			continue
		}
		phases = append(phases, fmt.Sprintf("%s/%d", p.Status.Phase, app.ExitCode))
		mesh.OneEvent(t, c, ns, p.Name, "ProxyQuit")
	}
	sort.Strings(phases)
	if fmt.Sprint(phases) != fmt.Sprint([]string{"Failed/42", "Succeeded/0"}) {
		t.Errorf("pods %v, want one Failed with 42 (ignored) and one Succeeded", phases)
	}
}

// claim creates a PersistentVolumeClaim (no class: it binds to one of the
// node's hostPath volumes) that outlives the Job's pods.
func claim(t *testing.T, c *cluster.Cluster, ns, name string) {
	t.Helper()
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")}},
		},
	}
	if _, err := c.Client().CoreV1().PersistentVolumeClaims(ns).Create(context.Background(), pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// onVolume puts the pod's "attempts" volume on the claim of that name
// instead of an emptyDir: the count must outlive the pod.
func onVolume(spec *corev1.PodSpec, name string) {
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == name {
			spec.Volumes[i].VolumeSource = corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name}}
		}
	}
}

func setEnv(c *corev1.Container, name, value string) {
	for i := range c.Env {
		if c.Env[i].Name == name {
			c.Env[i].Value = value
			return
		}
	}
	c.Env = append(c.Env, corev1.EnvVar{Name: name, Value: value})
}
