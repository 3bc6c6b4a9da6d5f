//go:build e2e

package istio

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/poll"
)

// drainFor is the proxies' terminationDrainDuration here (Istio's default
// is 5s): long enough to tell a drain from an immediate exit.
const drainFor = 2 * time.Second

// agentUnderTest is the real pilot-agent running `proxy sidecar` with the
// Envoy stand-in in a sandbox, as in an injected pod.
type agentUnderTest struct {
	t     *testing.T
	sb    *Sandbox
	agent *Command
}

// startAgent starts pilot-agent in a fresh sandbox holding files (plus the
// bootstrap template) with env added to the pod's.
func startAgent(t *testing.T, files map[string][]byte, env ...string) *agentUnderTest {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace")
	}
	if err := Built(); err != nil {
		t.Fatal(err)
	}
	if err := EnsureEnvoy(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The sandbox's root as the proxy image gives pilot-agent its files.
	tmpl, err := os.ReadFile(BootstrapTemplate())
	if err != nil {
		t.Fatal(err)
	}
	root := map[string][]byte{BootstrapTemplatePath: tmpl}
	maps.Copy(root, files)
	log, closeLog := cluster.ProcessLog("istio-aux-"+t.Name()+".log", "E2E_VERBOSE")
	t.Cleanup(closeLog)
	sb, err := NewSandbox(root, log)
	if err != nil {
		t.Fatal(err)
	}
	// The environment an injected istio-proxy container gives pilot-agent,
	// as far as it matters outside a cluster. CLOUD_PLATFORM=none spares
	// the agent probing cloud metadata servers.
	podEnv := []string{
		"POD_NAME=job-worker-0", "POD_NAMESPACE=default", "SERVICE_ACCOUNT=" + ServiceAccount,
		"INSTANCE_IP=127.0.0.1", "HOST_IP=127.0.0.1",
		"PILOT_CERT_PROVIDER=istiod", "CA_ADDR=istiod." + Namespace + ".svc:15012",
		"TRUST_DOMAIN=cluster.local", "ISTIO_META_CLUSTER_ID=Kubernetes",
		"CLOUD_PLATFORM=none",
		fmt.Sprintf(`PROXY_CONFIG={"binaryPath":%q,"terminationDrainDuration":%q}`, EnvoyBin(), drainFor),
	}
	a := &agentUnderTest{t: t, sb: sb}
	a.agent, err = sb.Start("pilot-agent", append(podEnv, env...), filepath.Join(BinDir(), "pilot-agent"),
		"proxy", "sidecar", "--domain", "default.svc.cluster.local")
	if err != nil {
		_ = sb.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.agent.Stop()
		if err := sb.Close(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			t.Logf("pilot-agent output:\n%s", a.agent.Output())
		}
	})
	return a
}

// run runs a pilot-agent subcommand in the pod, as the kubelet's hooks or
// an exec do, and returns its exit code and how long it took.
func (a *agentUnderTest) run(timeout time.Duration, args ...string) (int, time.Duration, string) {
	a.t.Helper()
	c, code, err := a.sb.Run(strings.Join(append([]string{"pilot-agent"}, args...), " "), timeout, nil, filepath.Join(BinDir(), "pilot-agent"), args...)
	if err != nil {
		a.t.Fatal(err)
	}
	return code, c.Ran(), c.Output()
}

// waitReady is the postStart hook of a held pod: `pilot-agent wait`.
func (a *agentUnderTest) waitReady() time.Duration {
	a.t.Helper()
	code, took, out := a.run(70*time.Second, "wait")
	if code != 0 {
		a.t.Fatalf("pilot-agent wait: exit %d after %s: %s", code, took, out)
	}
	ready := time.Since(a.agent.Started)
	a.t.Logf("pilot-agent wait: exit 0 after %s (%s after the agent started; the stand-in is ready after 1s)", took.Round(time.Millisecond), ready.Round(time.Millisecond))
	if ready < time.Second {
		a.t.Errorf("ready %s after start, before the stand-in's 1s delay", ready)
	}
	return ready
}

// exits waits for the agent's exit and checks its code and duration bounds.
func (a *agentUnderTest) exits(code int, within time.Duration) time.Duration {
	a.t.Helper()
	start := time.Now()
	got, err := a.agent.Wait(within)
	if err != nil {
		a.t.Fatal(err)
	}
	if got != code {
		a.t.Errorf("pilot-agent exit %d, want %d", got, code)
	}
	return time.Since(start)
}

// readyAgent starts pilot-agent with a workload certificate of its own
// and waits until its proxy is ready.
func readyAgent(t *testing.T) *agentUnderTest {
	t.Helper()
	ca, err := cluster.NewCA("workload-ca")
	if err != nil {
		t.Fatal(err)
	}
	certs, err := WorkloadCerts(ca, "default", ServiceAccount)
	if err != nil {
		t.Fatal(err)
	}
	a := startAgent(t, certs, "XDS_ROOT_CA="+WorkloadCertsDir+"/root-cert.pem")
	a.waitReady()
	return a
}

// TestAgentQuit: the quit istio-aux sends, `pilot-agent request POST
// quitquitquit` (Envoy's admin on 15000), makes Envoy exit 0 and then the
// agent, so the container terminates with 0.
func TestAgentQuit(t *testing.T) {
	a := readyAgent(t)
	code, took, out := a.run(70*time.Second, "request", "POST", "quitquitquit")
	// It prints Envoy's answer (after a line from its memory-limit
	// library).
	if code != 0 || !strings.Contains("\n"+out, "\nOK\n") {
		t.Fatalf("quitquitquit: exit %d, output %q", code, out)
	}
	exited := a.exits(0, 10*time.Second)
	t.Logf("quitquitquit: exit 0 in %s; pilot-agent exit 0 %s after it returned", took.Round(time.Millisecond), exited.Round(time.Millisecond))
	for _, line := range []string{"quitquitquit: exiting 0", "Envoy exited normally"} {
		if !a.agent.Printed(line) {
			t.Errorf("no %q in the output", line)
		}
	}
	// A quit that arrives after the proxy is gone fails fast: nothing
	// listens on 15000 any more.
	code, took, _ = a.run(70*time.Second, "request", "POST", "quitquitquit")
	t.Logf("quitquitquit with the proxy gone: exit %d in %s", code, took.Round(time.Millisecond))
	if code == 0 || took > 5*time.Second {
		t.Errorf("quitquitquit with the proxy gone: exit %d in %s, want a fast failure", code, took)
	}
}

// TestAgentSIGTERM: the kubelet's SIGTERM to a classic sidecar makes the
// agent drain Envoy's listeners for terminationDrainDuration, then stop
// Envoy and exit 0.
func TestAgentSIGTERM(t *testing.T) {
	a := readyAgent(t)
	if err := a.agent.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	took := a.exits(0, drainFor+10*time.Second)
	t.Logf("SIGTERM: pilot-agent exit 0 after %s (terminationDrainDuration %s)", took.Round(time.Millisecond), drainFor)
	if took < drainFor {
		t.Errorf("exited %s after SIGTERM, before the %s drain", took, drainFor)
	}
	if !a.agent.Printed("drain_listeners inboundonly&graceful") {
		t.Error("Envoy's listeners were not drained")
	}
}

// TestAgentNativeSidecarStop: a native sidecar's preStop hook asks the
// agent to drain (`pilot-agent request --debug-port=15020 POST drain`);
// the kubelet's SIGTERM after the apps are gone then ends it at once.
func TestAgentNativeSidecarStop(t *testing.T) {
	a := readyAgent(t)
	code, took, out := a.run(70*time.Second, "request", "--debug-port=15020", "POST", "drain")
	if code != 0 {
		t.Fatalf("preStop drain: exit %d: %s", code, out)
	}
	if err := poll.Until(context.Background(), 10*time.Second, func(context.Context) (bool, error) {
		return a.agent.Printed("skip_exit"), nil
	}); err != nil {
		t.Errorf("the stand-in saw no drain with skip_exit: %v", err)
	}
	if err := a.agent.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := a.exits(0, 10*time.Second)
	t.Logf("preStop drain: exit 0 in %s; SIGTERM: pilot-agent exit 0 after %s", took.Round(time.Millisecond), exited.Round(time.Millisecond))
	if exited >= drainFor {
		t.Errorf("exited %s after SIGTERM; an agent already drained exits at once", exited)
	}
}

// TestAgentAsInAPod: the files a real node's pod gives the agent — the
// proxy image's, and the istio-ca-root-cert ConfigMap at
// /var/run/secrets/istio — but no workload certificates and a CA that
// cannot be reached: the agent retries the CA in the background, Envoy
// still gets ready, and the quit works. So the proxy image needs no
// certificates baked in (ProxyImageContents).
func TestAgentAsInAPod(t *testing.T) {
	ca, err := cluster.NewCA("istiod-ca")
	if err != nil {
		t.Fatal(err)
	}
	a := startAgent(t, map[string][]byte{IstioCARootCert: ca.CertPEM})
	a.waitReady()
	if code, _, out := a.run(70*time.Second, "request", "POST", "quitquitquit"); code != 0 {
		t.Fatalf("quitquitquit: exit %d: %s", code, out)
	}
	a.exits(0, 10*time.Second)
	if !a.agent.Printed("failed to sign") && !a.agent.Printed("ca request failed") {
		t.Log("the agent did not report the unreachable CA (it may not have asked yet)")
	}
}
