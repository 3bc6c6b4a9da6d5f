//go:build tools

// Package tools pins the Kubeflow training operator v1 (TFJob, PyTorchJob),
// built from the Go module proxy. Its own module: it moves k8s.io and
// controller-runtime to the versions its go.mod requires.
package tools

import (
	_ "github.com/kubeflow/training-operator/cmd/training-operator.v1"
)
