// Package record names and encodes the pod states that hack/record.sh records
// from real runs into test/testdata. It is pure, so that the replay test can
// check that every recorded file's name says what its pod shows.
package record

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/istio-aux/istio-aux/pkg/decision"
	"github.com/istio-aux/istio-aux/pkg/keys"
	"github.com/istio-aux/istio-aux/pkg/podevent"
	"github.com/istio-aux/istio-aux/pkg/slim"
)

// States a recorded pod can be in, as State names them. Besides these,
// "<ready>of<total>" (containers ready, like kubectl's READY column, with
// "-restart<n>" once an app restarted) and "<app>-exited<code>" (one app
// finished while another still runs) are built from the pod.
const (
	StateDeleted         = "deleted"         // an ApiServerSource delete event
	StateDeleting        = "deleting"        // deletionTimestamp set
	StateSucceeded       = "succeeded"       // phase Succeeded
	StateFailed          = "failed"          // phase Failed
	StatePending         = "pending"         // no container status yet
	StateInit            = "init"            // an init container has not finished
	StatePodInitializing = "podinitializing" // init done, no container started
	StateAppsDone        = "apps-done"       // every app terminated, will not restart, proxy running
	StateAppFailed       = "app-failed"      // an app exited non-zero and the kubelet will run it again
	StateProxyExited     = "proxy-exited"    // every app and the proxy terminated, phase not final yet
)

// State names a pod's state for a recording's file name. eventType is the
// CloudEvent type the pod came in (a delete event is StateDeleted whatever
// the pod shows).
func State(pod *slim.Pod, eventType string) string {
	switch {
	case eventType == podevent.TypeAPIServerDelete:
		return StateDeleted
	case pod.DeletionTimestamp != nil:
		return StateDeleting
	case pod.Status.Phase == corev1.PodSucceeded:
		return StateSucceeded
	case pod.Status.Phase == corev1.PodFailed:
		return StateFailed
	case len(pod.Status.ContainerStatuses) == 0:
		return StatePending
	}
	proxyDone := true
	for _, s := range pod.Status.InitContainerStatuses {
		switch sidecar := isSidecar(pod, s.Name); {
		case !sidecar && s.State.Terminated == nil:
			return StateInit
		case sidecar && s.Name == keys.ProxyContainer:
			proxyDone = s.State.Terminated != nil
		}
	}
	var apps, exited, running, ready int
	var firstExited string
	failed := false
	for _, s := range pod.Status.ContainerStatuses {
		if s.Ready {
			ready++
		}
		if s.State.Running != nil {
			running++
		}
		if s.Name == keys.ProxyContainer {
			proxyDone = s.State.Terminated != nil
			continue
		}
		apps++
		if t := s.State.Terminated; t != nil {
			exited++
			if firstExited == "" {
				firstExited = fmt.Sprintf("%s-exited%d", s.Name, t.ExitCode)
			}
			// The kubelet will run it again (pkg/decision.WillRestart: the
			// container's rules and policy, then the pod's)?
			if c, ok := container(pod, s.Name); ok && t.ExitCode != 0 {
				failed = failed || decision.WillRestart(c, pod.Spec.RestartPolicy, t.ExitCode, decision.Kubelet{}) != decision.NoRestart
			}
		}
	}
	switch {
	case running == 0 && exited == 0:
		return StatePodInitializing
	case exited == apps && failed:
		return StateAppFailed
	case exited == apps && proxyDone:
		return StateProxyExited
	case exited == apps:
		return StateAppsDone
	case exited > 0:
		return firstExited
	}
	st := fmt.Sprintf("%dof%d", ready, len(pod.Status.ContainerStatuses))
	if n := maxRestarts(pod); n > 0 {
		st += fmt.Sprintf("-restart%d", n)
	}
	return st
}

func container(pod *slim.Pod, name string) (slim.Container, bool) {
	for _, c := range pod.Spec.Containers {
		if c.Name == name {
			return c, true
		}
	}
	return slim.Container{}, false
}

// isSidecar reports a native sidecar: an init container that keeps running.
func isSidecar(pod *slim.Pod, name string) bool {
	for _, c := range pod.Spec.InitContainers {
		if c.Name == name {
			return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
		}
	}
	return false
}

func maxRestarts(pod *slim.Pod) int32 {
	var n int32
	for _, s := range pod.Status.ContainerStatuses {
		n = max(n, s.RestartCount)
	}
	return n
}

// FileName is a recorded event's file: sequence, pod and state.
func FileName(seq int, pod, state string) string {
	return fmt.Sprintf("%03d-%s-%s.json", seq, pod, state)
}

// StateFromFileName is FileName's state for a pod (false if the name is not
// FileName's for that pod).
func StateFromFileName(file, pod string) (string, bool) {
	i := strings.IndexByte(file, '-')
	if i < 0 || !strings.HasSuffix(file, ".json") {
		return "", false
	}
	rest, ok := strings.CutPrefix(strings.TrimSuffix(file[i+1:], ".json"), pod+"-")
	return rest, ok && rest != ""
}
