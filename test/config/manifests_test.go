// Package config tests the manifests under config/: fast checks of what the
// YAML promises (restricted pods, least-privilege RBAC, webhook selectors
// that agree with decision.OptedIn) here, and a server-side dry-run against
// a real kube-apiserver with the real Knative CRDs in dryrun_test.go (e2e).
package config

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/modroot"
)

// dirs are the folders `ko apply -f` is documented for, in apply order.
// config/nats-single is config/nats's alternative, checked against it by
// TestNatsSingleIsNatsAlone.
var dirs = []string{"config/nats", "config", "config/dispatch", "config/eventing", "config/standalone"}

// koPaths are the binaries the manifests may reference.
var koPaths = map[string]bool{
	"github.com/istio-aux/istio-aux/webhook/cmd/webhook":               true,
	"github.com/istio-aux/istio-aux/bridge/cmd/bridge":                 true,
	"github.com/istio-aux/istio-aux/cmd/allinone":                      true,
	"github.com/istio-aux/istio-aux/functions/proxyquit/cmd/proxyquit": true,
	// config/nats: nats-server from the module istio-aux requires, and
	// the init container that fills its token.
	"github.com/nats-io/nats-server/v2":                   true,
	"github.com/istio-aux/istio-aux/bridge/cmd/natstoken": true,
}

// doc is one YAML document of a manifest file.
type doc struct {
	file string // relative to the repository root
	obj  *unstructured.Unstructured
}

func (d doc) String() string {
	return d.file + ":" + d.obj.GetKind() + "/" + d.obj.GetName()
}

var koRef = regexp.MustCompile(`ko://([A-Za-z0-9._/-]+)`)

// loadDocs reads the .yaml files of dir (relative to the repository root,
// or absolute) the way `ko apply -f dir` does: lexical order, not
// recursive. resolve, when set, rewrites every ko:// reference (as ko
// resolve would, with a placeholder image).
func loadDocs(t testing.TB, dir string, resolve func(path string) string) []doc {
	t.Helper()
	root := modroot.Dir()
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(root, dir)
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml")) // sorted
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s (%v)", dir, err)
	}
	var docs []doc
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if resolve != nil {
			b = koRef.ReplaceAllFunc(b, func(m []byte) []byte {
				return []byte(resolve(string(koRef.FindSubmatch(m)[1])))
			})
		}
		rel, _ := filepath.Rel(root, f)
		objs, err := cluster.DecodeManifests(b)
		if err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		for _, obj := range objs {
			docs = append(docs, doc{file: rel, obj: obj})
		}
	}
	return docs
}

// allDocs is every document of dirs once: a file of config/standalone that
// links to config/ is the same document.
func allDocs(t testing.TB) []doc {
	var docs []doc
	seen := map[string]bool{}
	for _, d := range dirs {
		for _, doc := range loadDocs(t, d, nil) {
			file, err := filepath.EvalSymlinks(filepath.Join(modroot.Dir(), doc.file))
			if err != nil {
				t.Fatal(err)
			}
			key := file + "\x00" + doc.obj.GetKind() + "/" + doc.obj.GetName()
			if !seen[key] {
				seen[key] = true
				docs = append(docs, doc)
			}
		}
	}
	return docs
}

// find returns the document of that kind and name, or fails the test.
func find(t *testing.T, docs []doc, kind, name string) doc {
	t.Helper()
	for _, d := range docs {
		if d.obj.GetKind() == kind && d.obj.GetName() == name {
			return d
		}
	}
	t.Fatalf("no %s %s", kind, name)
	return doc{}
}

// workload is the pod template of a workload document: its ServiceAccount
// and containers; ok is false for a document without one.
func workload(d doc) (sa string, containers []map[string]any, ok bool) {
	spec, ok, _ := unstructured.NestedMap(d.obj.Object, "spec", "template", "spec")
	sa, _, _ = unstructured.NestedString(spec, "serviceAccountName")
	list, _, _ := unstructured.NestedSlice(spec, "containers")
	for _, c := range list {
		containers = append(containers, c.(map[string]any))
	}
	return sa, containers, ok
}

// grant is one verb on one resource that a rule of a Role or ClusterRole
// gives.
type grant struct {
	d              doc
	resource, verb string
	names          []string // resourceNames; none for all
}

func grants(docs []doc) []grant {
	var out []grant
	for _, d := range docs {
		if k := d.obj.GetKind(); k != "Role" && k != "ClusterRole" {
			continue
		}
		rules, _, _ := unstructured.NestedSlice(d.obj.Object, "rules")
		for _, r := range rules {
			res, _, _ := unstructured.NestedStringSlice(r.(map[string]any), "resources")
			names, _, _ := unstructured.NestedStringSlice(r.(map[string]any), "resourceNames")
			verbs, _, _ := unstructured.NestedStringSlice(r.(map[string]any), "verbs")
			for _, rs := range res {
				for _, v := range verbs {
					out = append(out, grant{d, rs, v, names})
				}
			}
		}
	}
	return out
}

func readOnly(verb string) bool { return verb == "get" || verb == "list" || verb == "watch" }

// checkLinks checks the files of config/<dir>: its own exactly where own
// says so, every other one a link to target+its name.
func checkLinks(t *testing.T, dir, target string, own map[string]bool) (linked map[string]bool) {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(modroot.Dir(), "config", dir))
	if err != nil {
		t.Fatal(err)
	}
	linked = map[string]bool{}
	for _, e := range entries {
		got, err := os.Readlink(filepath.Join(modroot.Dir(), "config", dir, e.Name()))
		if own[e.Name()] != (err != nil) || (err == nil && got != target+e.Name()) {
			t.Errorf("config/%s/%s: link %q (%v); want its own file exactly for %v, else a link to %s", dir, e.Name(), got, err, own, target)
		}
		linked[e.Name()] = err == nil
	}
	return linked
}

// TestNatsSingleIsNatsAlone: config/nats-single is config/nats with one
// server: its own files are the server's configuration (tested against
// config/nats's by bridge/transport) and the StatefulSet, which is
// config/nats's but for its replicas; the rest is linked.
func TestNatsSingleIsNatsAlone(t *testing.T) {
	checkLinks(t, "nats-single", "../nats/", map[string]bool{"300-config.yaml": true, "500-nats.yaml": true})
	nats := func(dir string) []*unstructured.Unstructured {
		var out []*unstructured.Unstructured
		for _, d := range loadDocs(t, dir, nil) {
			if filepath.Base(d.file) == "500-nats.yaml" {
				out = append(out, d.obj)
			}
		}
		return out
	}
	a, b := nats("config/nats"), nats("config/nats-single")
	if len(a) != len(b) {
		t.Fatalf("500-nats.yaml: %d documents in config/nats, %d in config/nats-single", len(a), len(b))
	}
	for i := range a {
		if a[i].GetKind() == "StatefulSet" {
			if r, _, _ := unstructured.NestedFieldNoCopy(b[i].Object, "spec", "replicas"); fmt.Sprint(r) != "1" {
				t.Errorf("config/nats-single's StatefulSet has %v replicas, want 1", r)
			}
			r, _, _ := unstructured.NestedFieldNoCopy(a[i].Object, "spec", "replicas")
			_ = unstructured.SetNestedField(b[i].Object, r, "spec", "replicas")
		}
		if !equality.Semantic.DeepEqual(a[i].Object, b[i].Object) {
			t.Errorf("500-nats.yaml's %s %s differs between config/nats and config/nats-single beyond the replicas", a[i].GetKind(), a[i].GetName())
		}
	}
}

// TestStandaloneSharesConfig: config/standalone is config/ without the
// bridge, NATS and Knative shape, plus the all-in-one. What it shares with
// config/ is linked, not copied, so the two installs cannot drift.
func TestStandaloneSharesConfig(t *testing.T) {
	linked := checkLinks(t, "standalone", "../", map[string]bool{"206-rbac-allinone.yaml": true, "500-allinone.yaml": true})
	notShared := map[string]bool{"500-bridge.yaml": true, "600-proxyquit-ksvc.yaml": true, "610-proxyquit-networkpolicy.yaml": true}
	files, err := filepath.Glob(filepath.Join(modroot.Dir(), "config", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if name := filepath.Base(f); !notShared[name] && !linked[name] {
			t.Errorf("config/%s is not in config/standalone: the standalone install would lack it", name)
		}
	}
}

// numbered is how every manifest file is named: a three-digit apply-order
// prefix (100 namespace, 200 accounts, RBAC and policies, 300 config, ...).
var numbered = regexp.MustCompile(`^[0-9]{3}-[a-z0-9-]+\.yaml$`)

func TestEveryDocumentIsNamedAndNamespaced(t *testing.T) {
	clusterScoped := map[string]bool{
		"Namespace": true, "ClusterRole": true, "ClusterRoleBinding": true, "MutatingWebhookConfiguration": true,
		"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true, "PriorityClass": true,
	}
	seen := map[string]bool{}
	for _, d := range allDocs(t) {
		if d.obj.GetAPIVersion() == "" || d.obj.GetKind() == "" || d.obj.GetName() == "" {
			t.Errorf("%s: apiVersion, kind and metadata.name are required", d)
		}
		if !numbered.MatchString(filepath.Base(d.file)) {
			t.Errorf("%s: file name is not NNN-name.yaml (numbered in apply order)", d)
		}
		if l := d.obj.GetLabels()["app.kubernetes.io/name"]; l != "istio-aux" {
			t.Errorf("%s: label app.kubernetes.io/name = %q, want istio-aux (everything istio-aux installs carries it)", d, l)
		}
		if ns := d.obj.GetNamespace(); clusterScoped[d.obj.GetKind()] != (ns == "") || (ns != "" && ns != "istio-aux") {
			t.Errorf("%s: namespace %q (cluster-scoped kinds have none, the rest live in istio-aux)", d, ns)
		}
		key := d.obj.GetAPIVersion() + "/" + d.obj.GetKind() + "/" + d.obj.GetNamespace() + "/" + d.obj.GetName()
		if seen[key] {
			t.Errorf("%s: defined twice", d)
		}
		seen[key] = true
	}
}

func TestWorkloadsAreRestrictedAndBounded(t *testing.T) {
	workloads := 0
	for _, d := range allDocs(t) {
		sa, containers, ok := workload(d)
		if !ok {
			continue
		}
		workloads++
		if !strings.HasPrefix(sa, "istio-aux-") {
			t.Errorf("%s: serviceAccountName %q: each component runs as its own istio-aux-* account", d, sa)
		}
		if len(containers) == 0 {
			t.Errorf("%s: no containers", d)
		}
		for _, c := range containers {
			name := d.String() + "/" + c["name"].(string)
			img, _ := c["image"].(string)
			if !strings.HasPrefix(img, "ko://") || !koPaths[strings.TrimPrefix(img, "ko://")] {
				t.Errorf("%s: image %q is not one of our ko:// binaries", name, img)
			}
			for path, want := range map[string]any{
				"securityContext.runAsNonRoot":             true,
				"securityContext.allowPrivilegeEscalation": false,
				"securityContext.readOnlyRootFilesystem":   true,
				"securityContext.seccompProfile.type":      "RuntimeDefault",
			} {
				got, found, _ := unstructured.NestedFieldNoCopy(c, strings.Split(path, ".")...)
				if !found || got != want {
					t.Errorf("%s: %s = %v, want %v", name, path, got, want)
				}
			}
			if drop, _, _ := unstructured.NestedStringSlice(c, "securityContext", "capabilities", "drop"); len(drop) != 1 || drop[0] != "ALL" {
				t.Errorf("%s: capabilities.drop = %v, want [ALL]", name, drop)
			}
			for _, field := range []string{"resources.requests.cpu", "resources.requests.memory", "resources.limits.cpu",
				"resources.limits.memory", "readinessProbe", "livenessProbe"} {
				switch v, _, _ := unstructured.NestedFieldNoCopy(c, strings.Split(field, ".")...); v.(type) {
				case string, map[string]any: // a quantity, a probe
				default:
					t.Errorf("%s: %s missing", name, field)
				}
			}
		}
	}
	if workloads < 4 {
		t.Errorf("found %d workloads, want the webhook, bridge, dispatch and proxy-quit", workloads)
	}
}

func TestRBACHasNoWildcardsOrWrites(t *testing.T) {
	// Writes we grant on purpose, each explained in the YAML.
	allowedWrites := map[string]bool{
		"istio-aux-webhook/mutatingwebhookconfigurations/update": true,
		"istio-aux-webhook/secrets/update":                       true,
		"istio-aux-webhook/leases/create":                        true,
		"istio-aux-webhook/leases/update":                        true,
		// The watcher's Lease: which bridge (or all-in-one) watches.
		"istio-aux-watcher-lease/leases/create": true,
		"istio-aux-watcher-lease/leases/update": true,
		"istio-aux-proxyquit/pods/exec/create":  true,
		// A pod Istio CNI's start race left unable to start; which pods,
		// the policy istio-aux-proxyquit-delete says (TestDeletePolicy).
		"istio-aux-proxyquit/pods/delete":   true,
		"istio-aux-proxyquit/events/create": true,
		"istio-aux-proxyquit/events/patch":  true,
		// A failed quit's ProxyQuit Event, written before its exec.
		"istio-aux-proxyquit/events/delete": true,
		// SettingsApplied/Rejected/Restart on config-istio-aux, in
		// istio-aux only (the bridge and the function).
		"istio-aux-logging/events/create": true,
		"istio-aux-logging/events/patch":  true,
		// A TokenReview writes nothing; "create" is how one is asked.
		"istio-aux-proxyquit/tokenreviews/create": true,
		// The token of config/nats, into its one Secret (resourceNames).
		"istio-aux-nats/secrets/update": true,
	}
	for _, g := range grants(allDocs(t)) {
		if g.verb == "*" || g.resource == "*" {
			t.Errorf("%s: wildcard: %s on %s", g.d, g.verb, g.resource)
		}
		if !readOnly(g.verb) && !allowedWrites[g.d.obj.GetName()+"/"+g.resource+"/"+g.verb] {
			t.Errorf("%s: unexpected write %s on %s", g.d, g.verb, g.resource)
		}
	}
}

func TestConfigMapDocumentsEveryKey(t *testing.T) {
	contract := []string{"mode", "sidecars", "quit-command", "quit-native", "nats-url", "resync-period"}
	data, _, _ := unstructured.NestedStringMap(find(t, allDocs(t), "ConfigMap", "config-istio-aux").obj.Object, "data")
	for _, k := range contract {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(k) + `: `).MatchString(data["_example"]) {
			t.Errorf("_example does not document %q", k)
		}
	}
	for k, v := range data {
		if k != "_example" && !slices.Contains(contract, k) {
			t.Errorf("key %q is not part of the contract %v", k, contract)
		}
		// An empty quit command stops the function at start.
		if k == "quit-command" && strings.TrimSpace(v) == "" {
			t.Error("quit-command is set but empty")
		}
	}
}

// Both the bridge (its change filter) and the function decide whether a
// pod's apps are done; with different settings they would disagree and a
// pod could be filtered out forever. Each follows config-istio-aux itself
// (internal/settings), so each must be told where it is (SYSTEM_NAMESPACE)
// and be allowed to read it, and none may be handed a setting another way
// (an environment variable would be overridden by the ConfigMap's key, but
// would hide that the key is the one way).
func TestDecidersFollowTheSettings(t *testing.T) {
	deciders := map[string]string{ // image -> its ServiceAccount, once seen
		"ko://github.com/istio-aux/istio-aux/bridge/cmd/bridge":                 "",
		"ko://github.com/istio-aux/istio-aux/functions/proxyquit/cmd/proxyquit": "",
		"ko://github.com/istio-aux/istio-aux/cmd/allinone":                      "",
	}
	granted := map[string]bool{} // "Role/verb" on config-istio-aux
	readers := map[string]bool{} // ServiceAccounts bound to list and watch it
	for _, dir := range []string{"config", "config/standalone"} {
		docs := loadDocs(t, dir, nil)
		for _, g := range grants(docs) {
			if g.d.obj.GetKind() == "Role" && g.d.obj.GetNamespace() == "istio-aux" &&
				g.resource == "configmaps" && slices.Contains(g.names, "config-istio-aux") {
				granted[g.d.obj.GetName()+"/"+g.verb] = true
			}
		}
		for _, d := range docs {
			role, _, _ := unstructured.NestedString(d.obj.Object, "roleRef", "name")
			if d.obj.GetKind() != "RoleBinding" || !granted[role+"/watch"] || !granted[role+"/list"] {
				continue
			}
			subjects, _, _ := unstructured.NestedSlice(d.obj.Object, "subjects")
			for _, s := range subjects {
				name, _, _ := unstructured.NestedString(s.(map[string]any), "name")
				readers[name] = true
			}
		}
		for _, d := range docs {
			sa, containers, _ := workload(d)
			for _, c := range containers {
				image, _ := c["image"].(string)
				if _, ok := deciders[image]; !ok {
					continue
				}
				deciders[image] = sa
				env, _, _ := unstructured.NestedSlice(c, "env")
				hasNS := false
				for _, e := range env {
					switch name := e.(map[string]any)["name"]; name {
					case "SYSTEM_NAMESPACE":
						hasNS = true
					case "ISTIO_AUX_SIDECARS", "ISTIO_AUX_QUIT_NATIVE", "ISTIO_AUX_QUIT_COMMAND", "ISTIO_AUX_RESYNC":
						t.Errorf("%s: %s sets %s: the ConfigMap's key is the one way", d, image, name)
					}
				}
				if !hasNS {
					t.Errorf("%s: %s has no SYSTEM_NAMESPACE: it follows no settings", d, image)
				}
			}
		}
	}
	for image, sa := range deciders {
		switch {
		case sa == "":
			t.Errorf("%s: in no manifest, or without a serviceAccountName", image)
		case !readers[sa]:
			t.Errorf("%s runs as %s, which no Role lets list and watch config-istio-aux", image, sa)
		}
	}
}

// TestHooksRunTheImagesBinary: a hook that runs the container's own
// program names it where ko puts it, /ko-app/<last element of the import
// path> (for nats-server/v2, "v2"): a wrong path fails the hook, and the
// container is stopped without what the hook was for.
func TestHooksRunTheImagesBinary(t *testing.T) {
	for _, dir := range append(slices.Clone(dirs), "config/nats-single") {
		for _, d := range loadDocs(t, dir, nil) {
			_, containers, _ := workload(d)
			for _, c := range containers {
				image, _ := c["image"].(string)
				for _, hook := range []string{"preStop", "postStart"} {
					cmd, _, _ := unstructured.NestedStringSlice(c, "lifecycle", hook, "exec", "command")
					if len(cmd) == 0 || !strings.HasPrefix(cmd[0], "/ko-app/") {
						continue
					}
					if want := "/ko-app/" + path.Base(strings.TrimPrefix(image, "ko://")); cmd[0] != want {
						t.Errorf("%s: %s runs %s; ko puts %s's binary at %s", d, hook, cmd[0], image, want)
					}
				}
			}
		}
	}
}

// TestWorkloadsComeBeforeTheJobs: every Deployment and StatefulSet
// istio-aux installs runs at its own PriorityClass, which is installed
// with it: a NATS server whose volume ties it to a node that Jobs filled
// while it was replaced preempts them instead of staying Pending (issue
// 43, item 7). The Knative Service is left out: Knative admits
// priorityClassName only behind a feature flag, and the function holds
// no volume.
func TestWorkloadsComeBeforeTheJobs(t *testing.T) {
	classes := map[string]int64{}
	for _, d := range allDocs(t) {
		if d.obj.GetKind() == "PriorityClass" {
			v, _, _ := unstructured.NestedFieldNoCopy(d.obj.Object, "value")
			n, err := strconv.ParseFloat(fmt.Sprint(v), 64)
			if err != nil || n != float64(int64(n)) {
				t.Errorf("%s: value %v is not an integer (%v)", d, v, err)
			}
			classes[d.obj.GetName()] = int64(n)
		}
	}
	if v, ok := classes["istio-aux"]; !ok || v <= 0 || v >= 1_000_000_000 {
		t.Fatalf("PriorityClass istio-aux: %v (found %t); want one above the default 0 and below the system's classes", v, ok)
	}
	n := 0
	for _, d := range allDocs(t) {
		if k := d.obj.GetKind(); k != "Deployment" && k != "StatefulSet" {
			continue
		}
		n++
		if c, _, _ := unstructured.NestedString(d.obj.Object, "spec", "template", "spec", "priorityClassName"); c != "istio-aux" {
			t.Errorf("%s: priorityClassName %q, want istio-aux", d, c)
		}
	}
	if n == 0 {
		t.Fatal("no Deployment or StatefulSet in config/")
	}
}
