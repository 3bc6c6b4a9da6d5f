package images

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	"github.com/istio-aux/istio-aux/test/modroot"
)

// GoBinary builds a Go main package into dir and returns the binary's
// path (dir/<last element of pkg>). pkg is an import path or a path
// relative to the istio-aux module root ("./test/cmd/app"). The binary is
// static (CGO_ENABLED=0): the images have no libc. The build runs offline
// (GOPROXY=off): it happens inside the node's network namespace, where only
// the module cache is there to read.
func GoBinary(ctx context.Context, pkg, dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	out := filepath.Join(dir, path.Base(strings.TrimSuffix(pkg, "/")))
	// No -trimpath: without it the build shares most of the standard
	// library's compiled packages with the test binary's own build (a cold
	// cache builds the app in 14 s instead of 48 s here).
	cmd := exec.CommandContext(ctx, "go", "build", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Dir = modroot.Dir()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOPROXY=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w: %s", pkg, err, strings.TrimSpace(string(b)))
	}
	return out, nil
}
