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

// References of the images built from this repository's test programs.
const (
	// PauseRef is the pod sandbox image (test/cmd/pause); containerd's
	// sandbox_image names it, so it must be pushed before any pod starts.
	PauseRef = Registry + "/pause:dev"
	// AppRef is the test workload (test/cmd/app), at /app.
	AppRef = Registry + "/app:dev"
	// PythonRef is the training app installed as python (test/cmd/app's
	// python mode): Kubeflow's examples run `python -u mnist.py` or
	// `python -u train.py` and find it on PATH, so their manifests need no
	// change but the image.
	PythonRef = Registry + "/python:dev"
)

// pathEnv is the PATH of the test images: `kubectl exec ... pilot-agent`
// resolves there.
const pathEnv = "PATH=/usr/local/bin:/usr/bin:/bin"

// Pause builds the sandbox image's binary into dir and describes the image.
func Pause(ctx context.Context, dir string) (Image, error) {
	return fromBinary(ctx, dir, "./test/cmd/pause", PauseRef, "/pause")
}

// App builds the test workload image (see test/cmd/app for its APP_*
// environment). Its entrypoint is /app; `/app exit N` exits N.
func App(ctx context.Context, dir string) (Image, error) {
	return fromBinary(ctx, dir, "./test/cmd/app", AppRef, "/app")
}

// Python builds the python image: the test app at /usr/local/bin/python.
func Python(ctx context.Context, dir string) (Image, error) {
	return fromBinary(ctx, dir, "./test/cmd/app", PythonRef, "/usr/local/bin/python")
}

func fromBinary(ctx context.Context, dir, pkg, ref, at string) (Image, error) {
	bin, err := GoBinary(ctx, pkg, dir)
	if err != nil {
		return Image{}, err
	}
	return Image{
		Ref:        ref,
		Files:      []File{{Path: at, Mode: 0o755, Src: bin}},
		Entrypoint: []string{at},
		Env:        []string{pathEnv},
		WorkingDir: filepath.Dir(at),
	}, nil
}

// NonRootBase stands in for a distroless static:nonroot base (which cannot
// be pulled here) under the images ko builds: what it offers a static Go
// binary, a passwd entry for user 65532, which runAsNonRoot in istio-aux's
// and Knative's manifests needs as a number. Push it before a `ko resolve`
// that names it as KO_DEFAULTBASEIMAGE.
var NonRootBase = Image{
	Ref: Registry + "/static:nonroot",
	Files: []File{{Path: "/etc/passwd", Mode: 0o644,
		Data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")}},
	User: "65532",
}

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
