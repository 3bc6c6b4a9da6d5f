//go:build tools

// Package tools pins Kubeflow Trainer v2's controller manager and JobSet's,
// built from the Go module proxy. One module: trainer v2.3.0 requires
// sigs.k8s.io/jobset v0.12.0, the version run here.
package tools

import (
	_ "github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager"
	_ "sigs.k8s.io/jobset"
)
