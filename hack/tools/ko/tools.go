//go:build tools

// Package tools pins ko and crane for hack/ko-resolve.sh. It is a separate
// module so that ko's dependencies never move the versions istio-aux itself
// builds with.
package tools

import (
	_ "github.com/google/go-containerregistry/cmd/crane"
	_ "github.com/google/ko"
)
