package slim

import (
	"hash/fnv"
	"slices"
	"strconv"

	"k8s.io/apimachinery/pkg/types"
)

// Fingerprint hashes the state the quit decision reads: phase, deletion,
// restart policies and rules, which containers the pod's sidecars
// annotation names, and per container status its name, state kind, exit
// code and restart count. Two pods with the same fingerprint decide the
// same. Changes that only move the resourceVersion (conditions, IPs,
// readiness) leave it unchanged, and so do edits of the sidecars annotation
// that name no further container of the pod: no update pattern can make the
// bridge publish twice for one state.
func Fingerprint(p *Pod) uint64 {
	h := fnv.New64a()
	var buf []byte
	field := func(s string) {
		buf = append(buf[:0], s...)
		buf = append(buf, 0)
		_, _ = h.Write(buf)
	}
	field(string(p.Status.Phase))
	field(strconv.FormatBool(p.DeletionTimestamp != nil))
	field(string(p.Spec.RestartPolicy))
	containers := func(kind string, cs Containers) {
		for _, c := range cs {
			field(kind + c.Name)
			if c.RestartPolicy != nil {
				field(string(*c.RestartPolicy))
			}
			for _, r := range c.RestartPolicyRules {
				field(string(r.Action))
				if r.ExitCodes != nil {
					field(string(r.ExitCodes.Operator))
					for _, v := range r.ExitCodes.Values {
						field(strconv.Itoa(int(v)))
					}
				}
			}
		}
	}
	containers("init-spec:", p.Spec.InitContainers)
	containers("spec:", p.Spec.Containers)
	named := p.AnnotatedSidecars()
	slices.Sort(named)
	for _, n := range named {
		if slices.ContainsFunc(p.Spec.Containers, func(c Container) bool { return c.Name == n }) {
			field("sidecar:" + n)
		}
	}
	statuses := func(kind string, ss Statuses) {
		for _, s := range ss {
			field(kind + s.Name)
			field(stateKey(s.State))
			field(strconv.Itoa(int(s.RestartCount)))
		}
	}
	statuses("init:", p.Status.InitContainerStatuses)
	statuses("app:", p.Status.ContainerStatuses)
	return h.Sum64()
}

func stateKey(s State) string {
	switch {
	case s.Terminated != nil:
		return "terminated:" + strconv.Itoa(int(s.Terminated.ExitCode))
	case s.Running != nil:
		return "running"
	case s.Waiting != nil:
		return "waiting"
	}
	return "none"
}

// DedupID is the JetStream Nats-Msg-Id of a pod state: its uid and
// fingerprint. The CloudEvent id is <uid>/<resourceVersion> (the event
// contract, podevent.ID), but deduplicating on the state rather than the
// resourceVersion is what keeps a restarted bridge from delivering again a
// pod whose status churned (new resourceVersion, same decision) after it was
// published: the restarted bridge only sees the newest resourceVersion.
func DedupID(uid types.UID, fingerprint uint64) string {
	return string(uid) + "/" + strconv.FormatUint(fingerprint, 16)
}
