// Command unpin writes a release's manifests with every pinned user,
// group and fsGroup taken out of its pod templates: the release's OpenShift
// variant (istio-aux-openshift.yaml). OpenShift's default SCC,
// restricted-v2, refuses IDs outside the namespace's range and gives each
// pod its own from that range; config/ pins none but NATS's fsGroup (its
// volume must be writable by the image's non-root user on clusters that
// give no fsGroup), so this is the one difference, made from the same
// manifests rather than kept beside them.
//
//	go run ./hack/release/unpin < istio-aux.yaml > istio-aux-openshift.yaml
package main

import (
	"fmt"
	"os"

	"github.com/istio-aux/istio-aux/hack/internal/unpin"
)

func main() {
	if err := unpin.Unpin(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "unpin:", err)
		os.Exit(1)
	}
}
