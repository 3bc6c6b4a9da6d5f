// Package openshift stands in for what OpenShift does to pods that the
// harness's clusters, upstream Kubernetes, do not: the namespace allocator
// that gives each new namespace its UID, group and SELinux ranges (the
// openshift.io/sa.scc.* annotations), and the SecurityContextConstraints
// admission with its default SCC, restricted-v2: pods get a UID and fsGroup
// from their namespace's range before any webhook runs (Admit), and are
// refused after every webhook if anything pins an ID outside the range,
// adds a capability, escalates privilege or mounts the host (Validate);
// pods/exec is refused unless the caller may create the pod it execs into.
// OpenShift's own admission code (openshift/apiserver-library-go) is not
// served by the Go module proxy; this is written from its behaviour, and
// the README's stand-ins table names it. Standin runs it as admission
// webhooks of the harness's API server.
package openshift
