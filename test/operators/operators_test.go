package operators

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/istio-aux/istio-aux/test/cluster"
)

func TestVersionsMatchTools(t *testing.T) {
	for _, o := range []Operator{TrainingOperator, JobSet, Trainer} {
		v, err := cluster.ToolsVersion(o.Tool, o.Module)
		if err != nil {
			t.Fatal(err)
		}
		if v != o.Version {
			t.Errorf("%s: hack/tools/%s requires %s %s, the harness says %s", o.Name, o.Tool, o.Module, v, o.Version)
		}
	}
}

// hack/build-operators.sh caches each binary where Operator.Bin looks.
func TestBuildScriptCachesWhereTheHarnessLooks(t *testing.T) {
	script, err := os.ReadFile(filepath.Join(cluster.RepoRoot(), "hack", "build-operators.sh"))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []Operator{TrainingOperator, JobSet, Trainer} {
		call := fmt.Sprintf("build_pinned %s %s %s %s ", o.Tool, o.Module, o.Name, o.Binary)
		if !strings.Contains(strings.ReplaceAll(string(script), "\\\n  ", ""), call) {
			t.Errorf("hack/build-operators.sh has no %q: it would not build %s", call, o.Bin())
		}
	}
}

// The Secret is what OPA cert-controller's rotator (v0.16.0, ValidCert)
// keeps: a CA valid for its own name and a serving certificate for the
// Service, both still valid 90 days ahead, keys as PKCS#1.
func TestWebhookSecretPassesTheRotatorsCheck(t *testing.T) {
	for _, o := range []Operator{TrainingOperator, JobSet, Trainer} {
		data, err := o.Webhook.SecretData()
		if err != nil {
			t.Fatal(err)
		}
		lookahead := time.Now().Add(90 * 24 * time.Hour)
		pool := x509.NewCertPool()
		ca := parse(t, data["ca.crt"])
		pool.AddCert(ca)
		if _, err := ca.Verify(x509.VerifyOptions{DNSName: o.Webhook.CAName, Roots: pool, CurrentTime: lookahead}); err != nil {
			t.Errorf("%s: CA: %v", o.Name, err)
		}
		if _, err := parse(t, data["tls.crt"]).Verify(x509.VerifyOptions{DNSName: o.Webhook.DNSName, Roots: pool,
			CurrentTime: lookahead, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("%s: serving certificate: %v", o.Name, err)
		}
		for _, k := range []string{"ca.key", "tls.key"} {
			b, _ := pem.Decode(data[k])
			if b == nil {
				t.Fatalf("%s: %s is not PEM", o.Name, k)
			}
			if _, err := x509.ParsePKCS1PrivateKey(b.Bytes); err != nil {
				t.Errorf("%s: %s: %v", o.Name, k, err)
			}
		}
		if _, err := tls.X509KeyPair(data["tls.crt"], data["tls.key"]); err != nil {
			t.Errorf("%s: %v", o.Name, err)
		}
	}
}

func parse(t *testing.T, p []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(p)
	if b == nil {
		t.Fatal("not PEM")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestFillSecret(t *testing.T) {
	rendered := []byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: kubeflow}\n---\n" +
		"apiVersion: v1\nkind: Secret\nmetadata: {name: training-operator-webhook-cert, namespace: kubeflow}\ntype: Opaque\n")
	out, err := fillSecret(rendered, TrainingOperator)
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(out), "---\n")
	var secret struct {
		Data map[string][]byte `json:"data"`
	}
	if err := yaml.Unmarshal([]byte(docs[len(docs)-1]), &secret); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"ca.crt", "ca.key", "tls.crt", "tls.key"} {
		if len(secret.Data[k]) == 0 {
			t.Errorf("no %s in the Secret:\n%s", k, out)
		}
	}
	if _, err := fillSecret(rendered, JobSet); err == nil {
		t.Error("no error for manifests without the operator's Secret")
	}
}

// Every overlay is a kustomization once its placeholders are filled.
func TestOverlaysParse(t *testing.T) {
	for _, o := range []Operator{TrainingOperator, JobSet, Trainer} {
		b, err := overlays.ReadFile("overlays/" + o.Name + "/kustomization.yaml")
		if err != nil {
			t.Fatal(err)
		}
		s := strings.NewReplacer("{{module}}", "../m", "{{image}}", "r/x", "{{tag}}", "v1", "{{python}}", "r/p:dev").Replace(string(b))
		if strings.Contains(s, "{{") {
			t.Errorf("%s: placeholder left:\n%s", o.Name, s)
		}
		var k struct {
			Kind      string   `json:"kind"`
			Resources []string `json:"resources"`
		}
		if err := yaml.Unmarshal([]byte(s), &k); err != nil {
			t.Fatalf("%s: %v", o.Name, err)
		}
		if k.Kind != "Kustomization" || len(k.Resources) == 0 {
			t.Errorf("%s: kind %q, resources %v", o.Name, k.Kind, k.Resources)
		}
	}
}
