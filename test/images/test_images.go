package images

import (
	"context"
	"path/filepath"
)

// References of the images built from this repository's test programs.
const (
	// PauseRef is the pod sandbox image (test/cmd/pause); containerd's
	// sandbox_image names it, so it must be pushed before any pod starts.
	PauseRef = Registry + "/pause:dev"
	// AppRef is the test workload (test/cmd/app), at /app.
	AppRef = Registry + "/app:dev"
)

// pathEnv is the PATH of the test images: `kubectl exec ... pilot-agent`
// resolves there.
const pathEnv = "PATH=/usr/local/bin:/usr/bin:/bin"

// Pause builds the sandbox image's binary into dir and describes the image.
func Pause(ctx context.Context, dir string) (Image, error) {
	return fromBinary(ctx, dir, "./test/cmd/pause", PauseRef, "/pause", nil)
}

// App builds the test workload image (see test/cmd/app for its APP_*
// environment). Its entrypoint is /app; `/app exit N` exits N.
func App(ctx context.Context, dir string) (Image, error) {
	return fromBinary(ctx, dir, "./test/cmd/app", AppRef, "/app", nil)
}

func fromBinary(ctx context.Context, dir, pkg, ref, at string, cmd []string) (Image, error) {
	bin, err := GoBinary(ctx, pkg, dir)
	if err != nil {
		return Image{}, err
	}
	return Image{
		Ref:        ref,
		Files:      []File{{Path: at, Mode: 0o755, Src: bin}},
		Entrypoint: []string{at},
		Cmd:        cmd,
		Env:        []string{pathEnv},
		WorkingDir: filepath.Dir(at),
	}, nil
}
