//go:build tools

// Package tools pins krew for the release's plugin manifest check
// (krew_test.go runs krew's own validate-krew-manifest, which installs every
// platform with krew). It is a separate module: krew v0.4.3 requires
// client-go v11, which must never reach istio-aux's build.
package tools

import (
	_ "sigs.k8s.io/krew/cmd/krew"
	_ "sigs.k8s.io/krew/cmd/validate-krew-manifest"
)
