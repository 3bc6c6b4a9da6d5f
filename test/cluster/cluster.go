// Package cluster runs a real, local Kubernetes control plane for end-to-end
// tests and the demo: etcd and kube-apiserver built from source (see
// hack/build-k8s.sh) and the real kube-controller-manager, with either kwok
// (fake node and pod lifecycle, driven by the Stages in test/kwok; the
// controllers those suites need) or a Node, which makes it a whole
// single-node cluster: here the default admission plugins and controllers
// and kube-scheduler, the node itself in test/realnode. Everything binds
// 127.0.0.1 on free ports (with a node, also the node's address) and lives
// in a temporary work directory removed by Stop.
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
// namespace), which is most of the harness's code (test/realnode).
package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/istio-aux/istio-aux/test/modroot"
)

// Versions of the binaries the harness runs; hack/build-k8s.sh and
// hack/build-kwok.sh cache them under _output keyed by these. K8sVersion is
// the newest Kubernetes, what hack/tools/k8s/go.mod requires and what every
// cluster runs unless told otherwise; the older ones each have a module
// file of their own there (v1.MINOR.mod), built on demand by
// `hack/build-k8s.sh VERSION` (TestK8sVersionsMatchTheirModuleFiles).
const (
	K8sVersion = "v1.36.3"
	K8sV133    = "v1.33.13"
	K8sV132    = "v1.32.13"
	// K8sV131 is OpenShift 4.18's Kubernetes. Its module file pins the
	// staging modules the Go module proxy serves at 1.31's last patch or
	// the nearest before it (hack/tools/k8s/v1.31.mod).
	K8sV131     = "v1.31.14"
	KwokVersion = "v0.8.0"
)

// K8sVersions are the Kubernetes versions the harness can run, newest
// first.
var K8sVersions = []string{K8sVersion, K8sV133, K8sV132, K8sV131}

// Options select what runs besides etcd and kube-apiserver.
type Options struct {
	// Version is the control plane's Kubernetes version (one of
	// K8sVersions; "" is K8sVersion). etcd and kubectl are the newest's
	// whatever it is, as a cluster's etcd and a user's kubectl are not the
	// API server's.
	Version string
	// ControllerManager runs kube-controller-manager (Job, garbage
	// collector, namespace controllers).
	ControllerManager bool
	// Kwok runs kwok with one fake node, our Stages, a pod binder and a
	// per-pod Exec so that `kubectl exec` runs the stub pilot-agent.
	Kwok bool
	// Node, when set, makes a whole single-node cluster, as kubeadm would:
	// the default admission plugins and controllers, kube-scheduler, and
	// this node (see Node). It implies ControllerManager.
	Node Node
	// Log receives every process's output; nil discards it.
	Log io.Writer
	// Profiling serves kube-apiserver's /debug/pprof (off otherwise, as
	// its cost is not the cluster's).
	Profiling bool
	// APIServerArgs are added to kube-apiserver's flags.
	APIServerArgs []string
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
	etcdURL    string

	cancel context.CancelFunc // stops the harness's own clients
	wg     sync.WaitGroup

	mu    sync.Mutex
	procs []*Process // in start order; stopped in reverse
	quits string     // the stub pilot-agent's record file
}

// Node is a real node that joins the control plane (Options.Node) and
// makes it a whole cluster. Start and Stop call its methods in this order:
// WorkDirBase, IP and APIServerArgs before kube-apiserver starts, Start
// once the control plane runs with its scheduler, and Stop first of all.
type Node interface {
	// WorkDirBase is the directory the cluster's work directory goes in;
	// "" is the temporary directory.
	WorkDirBase() string
	// IP is the node's address: kube-apiserver advertises it (the
	// kubernetes Service's endpoint) and serves on it, and its serving
	// certificate covers it.
	IP() string
	// APIServerArgs are the kube-apiserver flags the node needs. It may
	// issue the certificates they name (IssueCert).
	APIServerArgs(c *Cluster) ([]string, error)
	// Start runs the node and returns once it works.
	Start(ctx context.Context, c *Cluster) error
	// Stop stops the node, its processes, pods and what they left
	// mounted; Cluster.Stop calls it before it stops the control plane,
	// which the node's programs watch. It must stop what a Start that
	// failed half-way left, and do nothing when Start never ran.
	Stop() error
}

// Start brings the control plane up and returns once it serves requests
// (and, with Kwok, once the fake node is Ready). On error everything already
// started is stopped.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	if opts.Node != nil && opts.Kwok {
		return nil, errors.New("options Node and Kwok are exclusive: the pod binder serves one node")
	}
	base := ""
	if opts.Node != nil {
		base = opts.Node.WorkDirBase()
	}
	if base == "" {
		sweepWorkDirs(os.TempDir())
	}
	dir, err := os.MkdirTemp(base, fmt.Sprintf("%s%d-", workDirPrefix, os.Getpid()))
	if err != nil {
		return nil, fmt.Errorf("creating work dir: %w", err)
	}
	if opts.Version == "" {
		opts.Version = K8sVersion
	}
	started := &Cluster{opts: opts, dir: dir, binDir: K8sBinDirOf(opts.Version)}
	c = started
	defer func() {
		// Not c: a `return nil, err` has cleared it by now.
		if err != nil {
			_ = started.Stop()
			c = nil
		}
	}()
	if opts.Node != nil {
		c.opts.ControllerManager = true
	}
	need := []string{filepath.Join(K8sBinDir(), "etcd"), filepath.Join(c.binDir, "kube-apiserver"), filepath.Join(c.binDir, "kube-controller-manager"), Kubectl()}
	if opts.Node != nil {
		need = append(need, filepath.Join(c.binDir, "kube-scheduler"))
	}
	for _, b := range need {
		if _, err := os.Stat(b); err != nil {
			return nil, fmt.Errorf("%s missing (run hack/build-k8s.sh %s): %w", b, opts.Version, err)
		}
	}
	steps := []func(context.Context) error{c.startEtcd, c.startAPIServer}
	if c.opts.ControllerManager {
		steps = append(steps, c.startControllerManager)
	}
	if opts.Node != nil {
		steps = append(steps, c.startScheduler, func(ctx context.Context) error { return opts.Node.Start(ctx, c) })
	}
	if opts.Kwok {
		steps = append(steps, c.startKwok)
	}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// workDirPrefix starts every cluster work dir's name; the pid of the
// process that made it follows (a node's goes where its WorkDirBase says,
// and the node sweeps it).
const workDirPrefix = "istio-aux-cluster-"

// sweepWorkDirs removes the work dirs in dir of processes that are gone: a
// run killed mid-way (SIGKILL, a crash) could not remove its own. Nothing
// is mounted under them: the only mounts are a real node's, in a mount
// namespace that died with its process, under the node's WorkDirBase.
func sweepWorkDirs(dir string) {
	matches, _ := filepath.Glob(filepath.Join(dir, workDirPrefix+"*-*"))
	for _, m := range matches {
		pid, err := strconv.Atoi(strings.SplitN(strings.TrimPrefix(filepath.Base(m), workDirPrefix), "-", 2)[0])
		if err != nil || pid == os.Getpid() {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); os.IsNotExist(err) {
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

// Version is the control plane's Kubernetes version.
func (c *Cluster) Version() string { return c.opts.Version }

// Dir is the cluster's temporary work directory (removed by Stop). It
// holds the CA's certificate, ca.crt, and a kubeconfig per identity of the
// control plane, <name>.kubeconfig: with a Node, kube-proxy.kubeconfig too.
func (c *Cluster) Dir() string { return c.dir }

// Log is the cluster's process log, safe for concurrent writes: each line
// is prefixed with who wrote it ("harness| ").
func (c *Cluster) Log() io.Writer { return logFor(c.opts.Log) }

// CA is the cluster's certificate authority. Tests use it to issue serving
// certificates for webhooks on 127.0.0.1 (its PEM is the caBundle).
func (c *Cluster) CA() *CA { return c.ca }

// Stop stops the harness's clients, then the node (Node.Stop), then every
// process in reverse start order (kwok and kube-controller-manager before
// kube-apiserver, which would otherwise wait about a minute for their
// watches, then etcd), and removes the work directory.
func (c *Cluster) Stop() error {
	if c.cancel != nil {
		c.cancel()
	}
	c.wg.Wait()
	var errs []error
	if c.opts.Node != nil {
		errs = append(errs, c.opts.Node.Stop())
	}
	c.mu.Lock()
	procs := c.procs
	c.procs = nil
	c.mu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		if err := procs[i].Stop(); err != nil {
			errs = append(errs, err)
		}
	}
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

// K8sBinDir is the cached binaries' directory of the newest Kubernetes.
func K8sBinDir() string { return K8sBinDirOf(K8sVersion) }

// K8sBinDirOf is the cached binaries' directory of a Kubernetes version.
func K8sBinDirOf(version string) string { return filepath.Join(CacheDir(), "k8s-"+version, "bin") }

// Kubectl is the newest kubectl, which the harness and the tests use on
// every cluster, as a user's is not the API server's version.
func Kubectl() string { return filepath.Join(K8sBinDir(), "kubectl") }

// KwokDir is the cached kwok build (bin/ and manifests/).
func KwokDir() string { return filepath.Join(CacheDir(), "kwok-"+KwokVersion) }

// ToolsVersion is the version of module that the tools module
// hack/tools/<tool> requires: what the hack/build-*.sh scripts build and
// cache under, which the harness's version constants must equal.
func ToolsVersion(tool, module string) (string, error) {
	return ToolsVersionIn(tool, "go.mod", module)
}

// ToolsVersionIn is ToolsVersion read from another module file of the tools
// module (one that `go build -modfile` reads: hack/tools/k8s/v1.32.mod).
func ToolsVersionIn(tool, modfile, module string) (string, error) {
	gomod, err := os.ReadFile(filepath.Join(RepoRoot(), "hack", "tools", tool, modfile))
	if err != nil {
		return "", err
	}
	m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?` + regexp.QuoteMeta(module) + ` (v\S+)`).FindSubmatch(gomod)
	if m == nil {
		return "", fmt.Errorf("hack/tools/%s/%s: no `require %s <version>` line", tool, modfile, module)
	}
	return string(m[1]), nil
}

// K8sModFile is the module file of hack/tools/k8s that builds version.
func K8sModFile(version string) string {
	if version == K8sVersion {
		return "go.mod"
	}
	minor := strings.SplitN(strings.TrimPrefix(version, "v"), ".", 3)
	if len(minor) < 2 {
		return "go.mod"
	}
	return "v1." + minor[1] + ".mod"
}

// WriteKubeconfig writes Dir()/name.kubeconfig and returns its path:
// server, the cluster's CA, and user authenticating as auth says (a token
// or a client certificate).
func (c *Cluster) WriteKubeconfig(name, server, user string, auth *clientcmdapi.AuthInfo) (string, error) {
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
