// Package cluster runs a real, local Kubernetes control plane for end-to-end
// tests and the demo: etcd and kube-apiserver built from source (see
// hack/build-k8s.sh) and the real kube-controller-manager, with either kwok
// (fake node and pod lifecycle, driven by the Stages in test/kwok; the
// controllers those suites need) or a real node, a whole single-node cluster
// (whole.go): the default admission plugins and controllers, kube-scheduler,
// kube-proxy, CoreDNS, an image registry, and containerd, runc and the
// kubelet, in a network namespace of the test binary's own (RunInNetns).
// Everything binds 127.0.0.1 on free ports (the real node also its bridge
// address, NodeIP) and lives in a temporary work directory removed by Stop.
//
// Why not kwokctl's binary runtime for the control plane (checked against
// sigs.k8s.io/kwok v0.8.0): it starts every component detached (Setsid)
// and tracks it by a pid file only, so a test binary that dies leaves the
// control plane running until someone runs `kwokctl delete cluster`, where
// this harness ties each process to the test and sweeps what a killed run
// left; its one PKI uses the admin key as the service-account signing key,
// and without --kube-admission it turns every admission plugin off, so the
// whole cluster would still need its own token keys (the function checks
// tokens against the published JWKS), CSR signing, the scheduler's and
// kube-proxy's identities and its admission flags passed through
// componentsPatches — most of what controlplane.go does. And it runs none
// of the real node (kubelet, containerd, kube-proxy, CoreDNS, the network
// namespace), which is where most of this package's code is.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/istio-aux/istio-aux/test/modroot"
)

// Versions of the binaries the harness runs; hack/build-k8s.sh and
// hack/build-kwok.sh cache them under _output keyed by these.
const (
	K8sVersion  = "v1.36.3"
	KwokVersion = "v0.8.0"
)

// Options select what runs besides etcd and kube-apiserver.
type Options struct {
	// ControllerManager runs kube-controller-manager (Job, garbage
	// collector, namespace controllers).
	ControllerManager bool
	// Kwok runs kwok with one fake node, our Stages, a pod binder and a
	// per-pod Exec so that `kubectl exec` runs the stub pilot-agent.
	Kwok bool
	// Node makes a whole single-node cluster, as kubeadm would: the
	// default admission plugins and controllers, kube-scheduler, and a real
	// node, RealNodeName (see node.go), with containerd and the kubelet,
	// kube-proxy, a registry every image is pulled from (PushImage), and
	// CoreDNS. The process must run inside RunInNetns; tests call
	// RequireNode first. It implies ControllerManager.
	Node bool
	// Log receives every process's output; nil discards it.
	Log io.Writer
}

// Cluster is a running local control plane.
type Cluster struct {
	opts       Options
	dir        string
	binDir     string
	kubeconfig string
	rest       *rest.Config
	client     kubernetes.Interface
	ca         *CA

	cancel context.CancelFunc // stops the harness's own clients
	wg     sync.WaitGroup

	mu    sync.Mutex
	procs []*process // in start order; stopped in reverse
	quits string     // the stub pilot-agent's record file
	node  *node      // the real node, with Options.Node

	// extraArgs are flags that other parts of the harness add to a process,
	// by process name (the real node's for kube-apiserver).
	extraArgs map[string][]string
}

// Start brings the control plane up and returns once it serves requests
// (and, with Kwok, once the fake node is Ready). On error everything already
// started is stopped.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	if opts.Node && opts.Kwok {
		return nil, errors.New("options Node and Kwok are exclusive: the pod binder serves one node")
	}
	// A real node's files go to the run's state directory, which the
	// parent removes even if this process dies.
	base := ""
	if opts.Node && insideNetns != "" {
		base = stateDirOf(insideNetns)
	}
	if base == "" {
		sweepWorkDirs(os.TempDir())
	}
	dir, err := os.MkdirTemp(base, fmt.Sprintf("%s%d-", workDirPrefix, os.Getpid()))
	if err != nil {
		return nil, fmt.Errorf("creating work dir: %w", err)
	}
	started := &Cluster{opts: opts, dir: dir, binDir: K8sBinDir()}
	c = started
	defer func() {
		// Not c: a `return nil, err` has cleared it by now.
		if err != nil {
			_ = started.Stop()
			c = nil
		}
	}()
	if opts.Node {
		c.opts.ControllerManager = true
	}
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kubectl"} {
		if _, err := os.Stat(filepath.Join(c.binDir, b)); err != nil {
			return nil, fmt.Errorf("%s missing in %s (run hack/build-k8s.sh): %w", b, c.binDir, err)
		}
	}
	etcdURL, err := c.startEtcd(ctx)
	if err != nil {
		return nil, err
	}
	if err := c.startAPIServer(ctx, etcdURL); err != nil {
		return nil, err
	}
	hctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	if c.opts.ControllerManager {
		if err := c.startControllerManager(ctx); err != nil {
			return nil, err
		}
	}
	if opts.Node {
		if err := c.startScheduler(); err != nil {
			return nil, err
		}
	}
	if opts.Kwok {
		if err := c.startKwok(ctx, hctx); err != nil {
			return nil, err
		}
	}
	if opts.Node {
		if err := c.startNode(ctx); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// workDirPrefix starts every cluster work dir's name; the pid of the
// process that made it follows (a real node's goes in its run's state dir,
// which Cleanup sweeps).
const workDirPrefix = "istio-aux-cluster-"

// sweepWorkDirs removes the work dirs in dir of processes that are gone: a
// run killed mid-way (SIGKILL, a crash) could not remove its own.
func sweepWorkDirs(dir string) {
	matches, _ := filepath.Glob(filepath.Join(dir, workDirPrefix+"*-*"))
	for _, m := range matches {
		pid, err := strconv.Atoi(strings.SplitN(strings.TrimPrefix(filepath.Base(m), workDirPrefix), "-", 2)[0])
		if err != nil || pid == os.Getpid() {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); os.IsNotExist(err) {
			_ = unmountUnder(m)
			_ = os.RemoveAll(m)
		}
	}
}

// Kubeconfig is the path of an admin (system:masters) kubeconfig file.
func (c *Cluster) Kubeconfig() string { return c.kubeconfig }

// RESTConfig returns a copy of the admin client configuration.
func (c *Cluster) RESTConfig() *rest.Config { return rest.CopyConfig(c.rest) }

// Client is an admin clientset.
func (c *Cluster) Client() kubernetes.Interface { return c.client }

// BinDir holds kubectl, kube-apiserver, etcd and kube-controller-manager.
func (c *Cluster) BinDir() string { return c.binDir }

// Dir is the cluster's temporary work directory (removed by Stop).
func (c *Cluster) Dir() string { return c.dir }

// CA is the cluster's certificate authority. Tests use it to issue serving
// certificates for webhooks on 127.0.0.1 (its PEM is the caBundle).
func (c *Cluster) CA() *CA { return c.ca }

// Stop stops the harness's clients, then every process in reverse start
// order (the kubelet, containerd, kwok and kube-controller-manager before
// kube-apiserver, which would otherwise wait about a minute for their
// watches, then etcd), the real node's pods as soon as the kubelet is gone
// (they watch the API server too: CoreDNS, istio-aux), then its shims, and
// removes the work directory.
func (c *Cluster) Stop() error {
	if c.cancel != nil {
		c.cancel()
	}
	c.wg.Wait()
	c.mu.Lock()
	procs := c.procs
	c.procs = nil
	c.mu.Unlock()
	var errs []error
	for i := len(procs) - 1; i >= 0; i-- {
		if err := procs[i].stop(15 * time.Second); err != nil {
			errs = append(errs, err)
		}
		if procs[i].name == "kubelet" {
			errs = append(errs, c.killPods())
		}
	}
	errs = append(errs, c.stopNode())
	if os.Getenv("ISTIO_AUX_KEEP_CLUSTER_DIR") == "" {
		errs = append(errs, os.RemoveAll(c.dir))
	}
	return errors.Join(errs...)
}

// RepoRoot is the istio-aux module root (modroot.Dir).
func RepoRoot() string { return modroot.Dir() }

// CacheDir is where hack/build-*.sh put binaries: $ISTIO_AUX_CACHE or _output.
func CacheDir() string {
	if d := os.Getenv("ISTIO_AUX_CACHE"); d != "" {
		return d
	}
	return filepath.Join(RepoRoot(), "_output")
}

// K8sBinDir is the cached Kubernetes binaries' directory.
func K8sBinDir() string { return filepath.Join(CacheDir(), "k8s-"+K8sVersion, "bin") }

// KwokDir is the cached kwok build (bin/ and manifests/).
func KwokDir() string { return filepath.Join(CacheDir(), "kwok-"+KwokVersion) }

// writeKubeconfig writes dir/name.kubeconfig: server, the cluster's CA, and
// user authenticating as auth says (a token or a client certificate).
func (c *Cluster) writeKubeconfig(name, server, user string, auth *clientcmdapi.AuthInfo) (string, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: c.path("ca.crt")}
	cfg.AuthInfos[user] = auth
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: user}
	cfg.CurrentContext = "local"
	path := c.path(name + ".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", err
	}
	return path, nil
}

func loadKubeconfig(path string) (*rest.Config, error) {
	return clientcmd.BuildConfigFromFlags("", path)
}
