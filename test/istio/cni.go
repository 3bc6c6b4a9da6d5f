package istio

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/images"
	"github.com/istio-aux/istio-aux/test/poll"
)

// CNIImage is the image of Istio's CNI node agent, built here
// (CNIImageContents) and pulled by the real nodes from their registry.
const CNIImage = images.Registry + "/install-cni:dev"

// CNIDaemonSet is the node agent's DaemonSet, as Istio's chart names it.
const CNIDaemonSet = "istio-cni-node"

// CNIImageContents is the node agent's image for release r, laid out as
// Istio's install-cni image (cni/deployments/kubernetes/Dockerfile.install-cni)
// where it matters: the agent at /usr/local/bin/install-cni (the chart's
// command), the plugin it copies onto every node at /opt/cni/bin/istio-cni
// (the only file there: the agent copies the whole directory), and, as the
// image's iptables base carries them, the machine's iptables programs with
// the libraries and extensions they load: the agent's repair controller
// runs them in a broken pod's network namespace.
func CNIImageContents(r Release) (images.Image, error) {
	img := images.Image{
		Ref: CNIImage,
		Files: []images.File{
			{Path: "/usr/local/bin/install-cni", Mode: 0o755, Src: filepath.Join(r.BinDir(), "install-cni")},
			{Path: "/opt/cni/bin/istio-cni", Mode: 0o755, Src: filepath.Join(r.BinDir(), "istio-cni")},
			{Path: "/etc/nsswitch.conf", Mode: 0o644, Data: []byte("hosts: files dns\n")},
		},
		Entrypoint: []string{"/usr/local/bin/install-cni"},
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/opt/cni/bin"},
		WorkingDir: "/opt/cni/bin",
	}
	for _, f := range img.Files {
		if f.Src == "" {
			continue
		}
		if _, err := os.Stat(f.Src); err != nil {
			return images.Image{}, fmt.Errorf("CNI image %s: %w (run hack/build-istio.sh %s)", f.Path, err, r.ModFile())
		}
	}
	iptables, err := hostIptables()
	if err != nil {
		return images.Image{}, fmt.Errorf("CNI image: %w", err)
	}
	img.Files = append(img.Files, iptables...)
	return img, nil
}

// The iptables programs a CNI agent runs, all one multi-call binary per
// backend (named by argv[0]).
var (
	iptablesNames = []string{"iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore"}
	iptablesMulti = map[string]string{"nft": "xtables-nft-multi", "legacy": "xtables-legacy-multi"}
)

// hostIptables are the machine's iptables programs (Debian's iptables
// package, which hack/node-deps.sh installs) as image files: each backend's
// multi-call binary under every name it answers to, the shared libraries
// they and their extensions load (as ldd lists them), and the extensions.
func hostIptables() ([]images.File, error) {
	var files []images.File
	var bins []string
	for backend, multi := range iptablesMulti {
		src := filepath.Join("/usr/sbin", multi)
		if _, err := os.Stat(src); err != nil {
			return nil, fmt.Errorf("iptables (%s): %w (run hack/node-deps.sh)", backend, err)
		}
		bins = append(bins, src)
		for _, name := range iptablesNames {
			files = append(files, images.File{Path: "/usr/sbin/" + name + "-" + backend, Mode: 0o755, Src: src})
			if backend == "nft" { // Debian's default alternative
				files = append(files, images.File{Path: "/usr/sbin/" + name, Mode: 0o755, Src: src})
			}
		}
	}
	extensions, err := filepath.Glob("/usr/lib/*-linux-gnu/xtables/*.so")
	if err != nil || len(extensions) == 0 {
		return nil, fmt.Errorf("iptables extensions not found under /usr/lib/*-linux-gnu/xtables (%w)", err)
	}
	libs := map[string]bool{}
	for _, f := range append(bins, extensions...) {
		deps, err := sharedLibraries(f)
		if err != nil {
			return nil, err
		}
		for _, d := range deps {
			libs[d] = true
		}
	}
	for _, f := range extensions {
		files = append(files, images.File{Path: f, Mode: 0o644, Src: f})
	}
	for lib := range libs {
		real, err := filepath.EvalSymlinks(lib)
		if err != nil {
			return nil, err
		}
		files = append(files, images.File{Path: lib, Mode: 0o755, Src: real})
	}
	return files, nil
}

// sharedLibraries are the absolute paths of the libraries ldd says path
// loads, the dynamic loader included.
func sharedLibraries(path string) ([]string, error) {
	out, err := exec.Command("ldd", path).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", path, err)
	}
	var libs []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		for _, field := range strings.Fields(sc.Text()) {
			if strings.HasPrefix(field, "/") {
				libs = append(libs, field)
			}
		}
	}
	return libs, nil
}

// CNI is Istio's CNI node agent, installed from a release's istio-cni chart
// as `helm install istio-cni … -n istio-system` installs it: its DaemonSet
// puts the istio-cni plugin on every node and chains it into the node's
// pod network (/etc/cni/net.d), so that each injected pod's traffic is
// captured when its sandbox is made.
type CNI struct {
	c         *cluster.Cluster
	manifests []byte
}

// InstallCNI renders the istio-cni chart of release r (values over the
// harness's: its image, pulled if not present), applies it and waits until
// the agent is ready on every node.
func InstallCNI(ctx context.Context, c *cluster.Cluster, r Release, values map[string]any) (*CNI, error) {
	v := map[string]any{
		"image":  CNIImage,
		"global": map[string]any{"imagePullPolicy": string(corev1.PullIfNotPresent)},
	}
	mergeInto(v, deepCopy(values).(map[string]any))
	objs, err := Render(r.CNIChartDir(), "istio-cni", Namespace, c.Version(), v)
	if err != nil {
		return nil, err
	}
	for _, o := range objs {
		if o.GetNamespace() == "" && o.GetKind() != "ClusterRole" && o.GetKind() != "ClusterRoleBinding" {
			o.SetNamespace(Namespace)
		}
	}
	manifests, err := cluster.EncodeManifests(objs)
	if err != nil {
		return nil, err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}
	if _, err := c.Client().CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating %s: %w", Namespace, err)
	}
	if err := c.Apply(ctx, manifests); err != nil {
		return nil, fmt.Errorf("installing istio-cni: %w", err)
	}
	n := &CNI{c: c, manifests: manifests}
	return n, n.WaitReady(ctx, 3*time.Minute)
}

// WaitReady waits until the agent's pod on every node is ready: the plugin
// is in place and chained in.
func (n *CNI) WaitReady(ctx context.Context, timeout time.Duration) error {
	var last string
	err := poll.Until(ctx, timeout, func(ctx context.Context) (bool, error) {
		ds, err := n.c.Client().AppsV1().DaemonSets(Namespace).Get(ctx, CNIDaemonSet, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		s := ds.Status
		last = fmt.Sprintf("desired %d, ready %d, updated %d", s.DesiredNumberScheduled, s.NumberReady, s.UpdatedNumberScheduled)
		return s.ObservedGeneration >= ds.Generation && s.DesiredNumberScheduled > 0 &&
			s.NumberReady == s.DesiredNumberScheduled && s.UpdatedNumberScheduled == s.DesiredNumberScheduled, nil
	})
	if err != nil {
		return fmt.Errorf("istio-cni not ready on every node (%s): %w; pods: %s", last, err, n.c.PodsSummary(ctx, Namespace, "k8s-app="+CNIDaemonSet))
	}
	return nil
}

// Uninstall deletes what InstallCNI applied and waits until the agents
// have gone: each takes its plugin out of its node's chain as it stops.
func (n *CNI) Uninstall(ctx context.Context) error {
	err := n.c.Delete(ctx, n.manifests)
	return errors.Join(err, poll.Until(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		pods, err := n.c.Client().CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=" + CNIDaemonSet})
		return err == nil && len(pods.Items) == 0, err
	}))
}
