package slim

import (
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
	h := newFNV()
	h.field(string(p.Status.Phase))
	h.field(strconv.FormatBool(p.DeletionTimestamp != nil))
	h.field(string(p.Spec.RestartPolicy))
	containers := func(kind string, cs Containers) {
		for _, c := range cs {
			h.field(kind, c.Name)
			if c.RestartPolicy != nil {
				h.field(string(*c.RestartPolicy))
			}
			for _, r := range c.RestartPolicyRules {
				h.field(string(r.Action))
				if r.ExitCodes != nil {
					h.field(string(r.ExitCodes.Operator))
					for _, v := range r.ExitCodes.Values {
						h.number("", int64(v))
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
			h.field("sidecar:", n)
		}
	}
	statuses := func(kind string, ss Statuses) {
		for _, s := range ss {
			h.field(kind, s.Name)
			if t := s.State.Terminated; t != nil {
				h.number("terminated:", int64(t.ExitCode))
			} else {
				h.field(stateKey(s.State))
			}
			h.number("", int64(s.RestartCount))
		}
	}
	statuses("init:", p.Status.InitContainerStatuses)
	statuses("app:", p.Status.ContainerStatuses)
	return uint64(*h)
}

// fnv64a is 64-bit FNV-1a (hash/fnv's New64a), fed each field's bytes and a
// zero byte after it, without allocating: the bridge fingerprints every
// pod event it caches.
type fnv64a uint64

func newFNV() *fnv64a {
	h := fnv64a(14695981039346656037)
	return &h
}

const fnvPrime = 1099511628211

// field hashes the concatenation of parts, then a zero byte.
func (h *fnv64a) field(parts ...string) {
	for _, s := range parts {
		for i := range len(s) {
			*h = (*h ^ fnv64a(s[i])) * fnvPrime
		}
	}
	*h *= fnvPrime // ^ 0
}

// number is field of prefix and v in decimal.
func (h *fnv64a) number(prefix string, v int64) {
	var b [20]byte
	h.field(prefix, string(strconv.AppendInt(b[:0], v, 10)))
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
