//go:build tools

// Package tools pins go-licenses, with which make release lists the
// third-party licences of what its binaries link (hack/release.sh). It is a
// separate module so that its dependencies never move istio-aux's.
package tools

import (
	_ "github.com/google/go-licenses/v2"
)
