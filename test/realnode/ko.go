package realnode

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/images"
)

// KoResolve runs `ko resolve` in dir (the module whose ko:// import paths
// the manifests name) with args (-f files and flags), building the images
// into the node's registry under repo, on images.NonRootBase (push it
// first), and returns the manifests with digest references. Offline
// (GOPROXY=off): the modules are in the module cache. ko reads dir's
// .ko.yaml; only the base image and the platform are overridden. env adds
// to ko's environment (GOFLAGS=-modfile=… for another module file of dir).
// (istio-aux's own images are made by hack/release.sh instead, as users
// without ko get them.)
func KoResolve(ctx context.Context, dir, repo string, env []string, args ...string) ([]byte, error) {
	base := images.NonRootBase
	args = append([]string{"resolve", "--platform=linux/" + goruntime.GOARCH, "--base-import-paths"}, args...)
	cmd := exec.CommandContext(ctx, filepath.Join(ToolsBinDir(), "ko"), args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"KO_DOCKER_REPO="+RegistryAddr+"/"+repo,
		"KO_DEFAULTBASEIMAGE="+RegistryAddr+strings.TrimPrefix(base.Ref, images.Registry),
		"GOPROXY=off")
	cmd.Env = append(cmd.Env, env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("ko %s: %w: %s", strings.Join(args, " "), err, cluster.LastLines(stderr.String(), 20))
	}
	return out, nil
}
