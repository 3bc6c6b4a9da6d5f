package check

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/istio-aux/istio-aux/pkg/names"
)

// behind is the backlog from which deliveries are called behind: a burst
// of Jobs finishing together passes below it within seconds.
const behind = 1000

// nats checks the NATS the bridge publishes to: config/nats's StatefulSet,
// or none (embedded in the all-in-one or the bridge, or another server).
func (r *run) nats() Item {
	show := r.kubectl("get statefulset " + names.NATSStatefulSet)
	if r.shape == ShapeStandalone {
		return ok(ItemNATS, "embedded in Deployment "+names.AllInOneDeployment)
	}
	sts, err := r.Client.AppsV1().StatefulSets(r.SystemNamespace).Get(r.ctx, names.NATSStatefulSet, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) && r.config.Found && r.config.NATSURL == "":
		return ok(ItemNATS, "embedded in the bridge (nats-url is empty)")
	case apierrors.IsNotFound(err) && r.config.Found && !strings.Contains(r.config.NATSURL, names.NATSStatefulSet+"."):
		return ok(ItemNATS, "another NATS server, "+r.config.NATSURL+": not checked")
	case apierrors.IsNotFound(err):
		return fail(ItemNATS, fmt.Sprintf("StatefulSet %s/%s is missing, and the bridge publishes to it", r.SystemNamespace, names.NATSStatefulSet), show)
	case err != nil:
		return fail(ItemNATS, fmt.Sprintf("reading StatefulSet %s/%s: %v", r.SystemNamespace, names.NATSStatefulSet, err), show)
	}
	want, ready := ptr.Deref(sts.Spec.Replicas, 1), sts.Status.ReadyReplicas
	switch {
	case ready == 0:
		return fail(ItemNATS, fmt.Sprintf("StatefulSet %s: no replica ready of %d: nothing is published or delivered%s", names.NATSStatefulSet, want, r.notReady(names.ComponentNATS)), show)
	case ready < want:
		return warn(ItemNATS, fmt.Sprintf("StatefulSet %s: %d of %d replicas ready%s", names.NATSStatefulSet, ready, want, r.notReady(names.ComponentNATS)), show)
	}
	return ok(ItemNATS, fmt.Sprintf("StatefulSet %s: %d/%d ready", names.NATSStatefulSet, ready, want))
}

// notReady says why the component's pods that are not Ready are not, as
// " (pod: why; ...)", or "" if it finds none.
func (r *run) notReady(component string) string {
	pods, err := r.componentPods(component)
	if err != nil {
		return ""
	}
	var whys []string
	for i := range pods {
		if p := &pods[i]; !podReady(p) {
			whys = append(whys, p.Name+": "+podWhy(p))
		}
	}
	if len(whys) == 0 {
		return ""
	}
	return " (" + strings.Join(whys, "; ") + ")"
}

// podWhy is what keeps a pod from being Ready: its first container that is
// not, waiting or ended, with how it last ended (the config/nats containers
// end their message with their last log line, FallbackToLogsOnError), or
// else its phase and the condition that is false.
func podWhy(p *corev1.Pod) string {
	for _, s := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
		if s.Ready || s.State.Terminated != nil && s.State.Terminated.ExitCode == 0 {
			continue
		}
		var parts []string
		if w := s.State.Waiting; w != nil && w.Reason != "" {
			parts = append(parts, w.Reason)
		}
		for _, t := range []*corev1.ContainerStateTerminated{s.State.Terminated, s.LastTerminationState.Terminated} {
			if t != nil {
				parts = append(parts, fmt.Sprintf("exited %d%s", t.ExitCode, lastLine(t.Message)))
				break
			}
		}
		if len(parts) == 0 {
			parts = append(parts, "running, not ready")
		}
		return fmt.Sprintf("container %s %s (%d restarts)", s.Name, strings.Join(parts, ", "), s.RestartCount)
	}
	for _, c := range p.Status.Conditions {
		if c.Status == corev1.ConditionFalse && c.Message != "" {
			return fmt.Sprintf("%s, %s: %s", p.Status.Phase, c.Type, c.Message)
		}
	}
	return string(p.Status.Phase)
}

// lastLine is ": " and the last line of a termination message, or "".
func lastLine(msg string) string {
	lines := strings.Split(strings.TrimSpace(msg), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	if last == "" {
		return ""
	}
	if len(last) > 200 {
		last = last[:200] + "..."
	}
	return ": " + last
}

// backlog reads the stream's backlog from a dispatcher's metrics, through
// the API server's pod proxy: the Lease holder first (the bridge and the
// all-in-one dispatch too), then the other pods that may dispatch.
func (r *run) backlog() Item {
	pods := r.metricsPods()
	if len(pods) == 0 {
		return warn(ItemBacklog, "unknown: no Ready bridge, dispatcher or all-in-one pod to read it from", r.kubectl("get pods"))
	}
	var errs []string
	for _, pod := range pods {
		show := fmt.Sprintf("kubectl get --raw /api/v1/namespaces/%s/pods/%s:%s/proxy/metrics | grep %s",
			r.SystemNamespace, pod, names.MetricsPort, names.MetricDispatchBacklog)
		v, found, err := r.pending(pod)
		switch {
		case err != nil:
			errs = append(errs, err.Error())
		case found && v >= behind:
			return warn(ItemBacklog, fmt.Sprintf("%.0f %s wait for delivery (read from %s): deliveries are behind", v, plural(int(v), "event"), pod), show)
		case found:
			it := ok(ItemBacklog, fmt.Sprintf("%.0f %s wait for delivery (read from %s)", v, plural(int(v), "event"), pod))
			it.Command = show
			return it
		}
	}
	msg := fmt.Sprintf("unknown: no dispatcher serves %s (an older istio-aux?)", names.MetricDispatchBacklog)
	if len(errs) > 0 {
		msg = "unknown: " + strings.Join(errs, "; ")
	}
	return warn(ItemBacklog, msg, r.kubectl("get pods"))
}

// metricsPods are the Ready pods that may serve the gauge, the Lease
// holder first, at most three.
func (r *run) metricsPods() []string {
	var out []string
	if r.holder != "" {
		out = append(out, r.holder)
	}
	for _, component := range []string{names.ComponentDispatch, names.ComponentBridge, names.ComponentAllInOne} {
		pods, err := r.componentPods(component)
		if err != nil {
			continue
		}
		for i := range pods {
			if p := &pods[i]; podReady(p) && p.Name != r.holder && len(out) < 3 {
				out = append(out, p.Name)
			}
		}
	}
	return out
}

// componentPods are the pods of istio-aux's component (its
// app.kubernetes.io/component label).
func (r *run) componentPods(component string) ([]corev1.Pod, error) {
	l, err := r.Client.CoreV1().Pods(r.SystemNamespace).List(r.ctx, metav1.ListOptions{LabelSelector: names.ComponentLabel + "=" + component})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// pending reads the gauge from a pod's metrics.
func (r *run) pending(pod string) (value float64, found bool, err error) {
	rw := r.Client.CoreV1().Pods(r.SystemNamespace).ProxyGet("http", pod, names.MetricsPort, "metrics", nil)
	if rw == nil {
		return 0, false, fmt.Errorf("no proxy to pod %s", pod)
	}
	raw, err := rw.DoRaw(r.ctx)
	if err != nil {
		return 0, false, fmt.Errorf("reading the metrics of pod %s through the API server: %w", pod, err)
	}
	return gauge(raw, names.MetricDispatchBacklog)
}

// gauge finds the named gauge in Prometheus text.
func gauge(text []byte, name string) (float64, bool, error) {
	dec := expfmt.NewDecoder(bytes.NewReader(text), expfmt.NewFormat(expfmt.TypeTextPlain))
	for {
		var mf dto.MetricFamily
		if err := dec.Decode(&mf); err != nil {
			if errors.Is(err, io.EOF) {
				return 0, false, nil
			}
			return 0, false, fmt.Errorf("reading metrics: %w", err)
		}
		if mf.GetName() != name || len(mf.GetMetric()) == 0 {
			continue
		}
		// Untyped: text without its TYPE line.
		switch m := mf.GetMetric()[0]; {
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue(), true, nil
		case m.GetUntyped() != nil:
			return m.GetUntyped().GetValue(), true, nil
		}
	}
}
