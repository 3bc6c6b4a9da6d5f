//go:build tools

// Package tools pins golangci-lint for `make test` (hack/lint.sh). It is a
// separate module so that the linters' dependencies never move the versions
// istio-aux itself builds with.
package tools

import (
	_ "github.com/golangci/golangci-lint/v2/cmd/golangci-lint"
)
