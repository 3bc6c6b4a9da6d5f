package explain

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/istio-aux/istio-aux/pkg/decision"
	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/pkg/names"
	"github.com/istio-aux/istio-aux/pkg/slim"
)

// apps lists each app's part in the decision and the containers that are
// not apps, exactly as Decide tells them apart (decision.Sidecars).
func (e *explanation) apps() {
	sidecars := decision.Sidecars(e.pod, e.in.Config.Decision)
	for _, c := range e.pod.Spec.Containers {
		if _, ok := sidecars[c.Name]; !ok {
			e.out.Apps = append(e.out.Apps, e.app(c))
			continue
		}
		if c.Name == keys.ProxyContainer {
			continue
		}
		where := "annotation"
		if slices.Contains(e.in.Config.Decision.ExtraSidecars, c.Name) {
			where = names.ConfigMap
		}
		e.out.Sidecars = append(e.out.Sidecars, Sidecar{Name: c.Name, Where: where})
	}
}

// app is one app container's state and, once it has terminated, whether
// the kubelet will run it again and by which setting (decision.WhyRestart,
// the rule Decide applies).
func (e *explanation) app(c slim.Container) App {
	s := statusOf(e.in.Pod, c.Name)
	a := App{Name: c.Name, State: "not-started"}
	if s == nil {
		a.Text = fmt.Sprintf("app %s has not started", c.Name)
		return a
	}
	a.Restarts = s.RestartCount
	attempt := ""
	if s.RestartCount > 0 {
		attempt = fmt.Sprintf(" (attempt %d)", s.RestartCount+1)
	}
	switch st := s.State; {
	case st.Running != nil:
		a.State, a.Text = "running", fmt.Sprintf("app %s is running%s", c.Name, attempt)
	case st.Terminated != nil:
		code := st.Terminated.ExitCode
		r, cause := decision.WhyRestart(c, e.pod.Spec.RestartPolicy, code, e.in.Config.Decision.Kubelet)
		a.State, a.ExitCode, a.RunsAgain = "terminated", ptr.To(code), ptr.To(r != decision.NoRestart)
		a.Text = fmt.Sprintf("app %s exited %d%s under %s: %s", c.Name, code, attempt, causeWords(c, cause), restartWords(r))
	default:
		reason := "waiting"
		if st.Waiting != nil && st.Waiting.Reason != "" {
			reason = st.Waiting.Reason
		}
		a.State, a.Text = "waiting", fmt.Sprintf("app %s is waiting to run (%s)%s", c.Name, reason, attempt)
	}
	return a
}

// statusOf is the named regular container's status, or nil.
func statusOf(p *corev1.Pod, name string) *corev1.ContainerStatus {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == name {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// causeWords names the setting that decided a restart.
func causeWords(c slim.Container, cause decision.RestartCause) string {
	switch cause.Source {
	case decision.FromRule:
		r := c.RestartPolicyRules[cause.Rule]
		codes := make([]string, 0, len(r.ExitCodes.Values))
		for _, v := range r.ExitCodes.Values {
			codes = append(codes, fmt.Sprint(v))
		}
		return fmt.Sprintf("its restart rule #%d (exit code %s [%s]: %s)", cause.Rule+1, r.ExitCodes.Operator, strings.Join(codes, ", "), r.Action)
	case decision.FromContainer:
		return "its own restartPolicy " + cause.Policy
	}
	return "the pod's restartPolicy " + cause.Policy
}

func restartWords(r decision.Restart) string {
	switch r {
	case decision.RestartContainer:
		return "the kubelet will run it again"
	case decision.RestartAll:
		return "the kubelet will restart every container of the pod, istio-proxy included"
	}
	return "it will not run again"
}
