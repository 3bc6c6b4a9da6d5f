package mesh

import (
	"context"
	"maps"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/images"
	"github.com/istio-aux/istio-aux/test/istio"
	"github.com/istio-aux/istio-aux/test/poll"
)

// App is how a training app behaves: it runs RunFor per attempt and exits
// with ExitCodes[i] on attempt i+1 (the last code for every later one).
// On a real node the test app (test/cmd/app) reads it from its environment
// and, unless NoNetwork, downloads its dataset through the proxy first; on
// kwok the Stages (test/kwok) read it from the pod's annotations. Either
// way nothing in it is about Istio or istio-aux.
type App struct {
	RunFor    string // "3s"; empty: 1s
	ExitCodes []int  // empty: 0
	NoNetwork bool
}

// AppContainer is the reference demo's training container, named as it
// is, running app. Its attempts are counted on the pod's "attempts"
// emptyDir (TrainingJob adds it), which outlives a container restart.
func AppContainer(app App) corev1.Container {
	c := corev1.Container{Name: "tensorflow", Image: images.AppRef,
		Env:          []corev1.EnvVar{{Name: "APP_ATTEMPT_FILE", Value: "/attempts/count"}},
		VolumeMounts: []corev1.VolumeMount{{Name: "attempts", MountPath: "/attempts"}}}
	if app.RunFor != "" {
		c.Env = append(c.Env, corev1.EnvVar{Name: "APP_RUN_FOR", Value: app.RunFor})
	}
	if len(app.ExitCodes) > 0 {
		c.Env = append(c.Env, corev1.EnvVar{Name: "APP_EXIT_CODES", Value: codes(app.ExitCodes)})
	}
	if app.NoNetwork {
		c.Env = append(c.Env, corev1.EnvVar{Name: "APP_NEEDS_NETWORK", Value: "false"})
	}
	return c
}

func codes(cs []int) string {
	s := make([]string, len(cs))
	for i, c := range cs {
		s[i] = strconv.Itoa(c)
	}
	return strings.Join(s, ",")
}

// TrainingJob is a Job of n workers, each one pod with the app container
// (AppContainer, or as given), as a training operator or a user writes it.
// The only things in it that a whole cluster would add by itself: the
// service account Istio's injected token needs (ServiceAccount admission
// fills it in; the kwok harness's API server runs without it), and, for
// kwok, the app's behaviour as annotations.
func TrainingJob(name string, n int32, policy corev1.RestartPolicy, app App, container *corev1.Container) *batchv1.Job {
	c := AppContainer(app)
	if container != nil {
		c = *container
	}
	annotations := map[string]string{}
	if app.RunFor != "" {
		annotations[cluster.AnnotationRunFor] = app.RunFor
	}
	if len(app.ExitCodes) > 0 {
		annotations[cluster.AnnotationExitCodes] = codes(app.ExitCodes)
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: batchv1.JobSpec{
			Completions: ptr.To(n), Parallelism: ptr.To(n), BackoffLimit: ptr.To(int32(6)),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Annotations: annotations},
				Spec: corev1.PodSpec{
					RestartPolicy:                 policy,
					ServiceAccountName:            istio.ServiceAccount,
					TerminationGracePeriodSeconds: ptr.To(int64(5)),
					Containers:                    []corev1.Container{c},
					Volumes: []corev1.Volume{{Name: "attempts",
						VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
				},
			},
		},
	}
}

// OptedIn is the namespace label that opts every pod in.
var OptedIn = map[string]string{keys.LabelEnabled: "true"}

// CreateNamespace creates a namespace with Istio's injection on and the
// given labels (OptedIn, or nil), and waits until it has its default
// ServiceAccount: on a whole cluster, ServiceAccount admission refuses a
// pod until then.
func CreateNamespace(ctx context.Context, cs kubernetes.Interface, name string, labels map[string]string) error {
	l := maps.Clone(injection)
	for k, v := range labels {
		l[k] = v
	}
	return CreatePlainNamespace(ctx, cs, name, l)
}

// DefaultTag is the revision tag a shape installed by revision points at
// its istiod (Options.Revision), as an install by revision names its
// default (istioctl tag set default --revision REVISION).
const DefaultTag = "default"

// injection are the labels by which CreateNamespace opts a namespace into
// the run's mesh (InjectionLabels of the shape Start started).
var injection = map[string]string{keys.LabelInjection: "enabled"}

// InjectionLabels are the namespace labels that select the injection of a
// mesh of shape o: istio-injection=enabled for Istio's default revision,
// istio.io/rev=default (the tag) for an install by revision, where no
// namespace carries istio-injection.
//
// On OpenShift (o.Platform) they also enforce Pod Security restricted, as
// OpenShift is phasing in for every namespace.
func InjectionLabels(o Options) map[string]string {
	l := map[string]string{keys.LabelInjection: "enabled"}
	if o.Revision != "" {
		l = map[string]string{keys.LabelRevision: DefaultTag}
	}
	if o.Platform == "openshift" {
		l["pod-security.kubernetes.io/enforce"] = "restricted"
	}
	return l
}

// CreatePlainNamespace creates a namespace with exactly these labels and
// waits until it has its default ServiceAccount.
func CreatePlainNamespace(ctx context.Context, cs kubernetes.Interface, name string, labels map[string]string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return err
	}
	return poll.Until(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, err
	})
}

// JobHas reports whether the Job has the condition typ (Complete, Failed,
// ...) with status True.
func JobHas(j *batchv1.Job, typ batchv1.JobConditionType) bool {
	for _, c := range j.Status.Conditions {
		if c.Type == typ && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// JobPods are the pods the Job controller made for the Job job in ns.
func JobPods(ctx context.Context, cs kubernetes.Interface, ns, job string) ([]corev1.Pod, error) {
	l, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=" + job})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}
