package natstoken_test

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/istio-aux/istio-aux/bridge/natstoken"
	"github.com/istio-aux/istio-aux/bridge/transport"
)

// TestCopyRunsAgain: the kubelet runs a pod's init containers again over
// the emptyDir it kept (a new sandbox, a node reboot), so Copy must succeed
// over the files it wrote before, with the Secret unchanged or changed, and
// leave exactly the Secret's keys, each with the Secret's value, readable
// by their owner only. A root process writes through a 0400 file: the test
// runs as user 65532 (the images' user) to see what the init container sees.
func TestCopyRunsAgain(t *testing.T) {
	dir, here := asNonRoot(t)
	if !here {
		return
	}
	secret := func(data map[string]string) *fakeSecrets {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "istio-aux-nats"}, Data: map[string][]byte{}}
		for k, v := range data {
			s.Data[k] = []byte(v)
		}
		return &fakeSecrets{secret: s}
	}
	for _, run := range []struct {
		name string
		data map[string]string // nil: no Secret
	}{
		{"first start", map[string]string{transport.SecretToken: "old-token", transport.SecretCA: "CA"}},
		{"again, the Secret unchanged", map[string]string{transport.SecretToken: "old-token", transport.SecretCA: "CA"}},
		{"again, the token replaced", map[string]string{transport.SecretToken: "new-token", transport.SecretCA: "CA"}},
		{"again, a key removed and one added", map[string]string{transport.SecretToken: "newer-token", transport.SecretUser: "u"}},
		{"again, the Secret deleted", nil},
	} {
		f := &fakeSecrets{}
		if run.data != nil {
			f = secret(run.data)
		}
		n, err := natstoken.Copy(context.Background(), f, "istio-aux-nats", dir, 0)
		if err != nil || n != len(run.data) {
			t.Fatalf("%s: Copy = %d, %v; want %d keys", run.name, n, err, len(run.data))
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
			info, err := e.Info()
			if err != nil {
				t.Fatal(err)
			}
			content, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil || string(content) != run.data[e.Name()] || info.Mode() != 0o400 {
				t.Errorf("%s: %s is %q (%v), mode %v; want %q, 0400", run.name, e.Name(), content, err, info.Mode(), run.data[e.Name()])
			}
		}
		want := slices.Sorted(func(yield func(string) bool) {
			for k := range run.data {
				if !yield(k) {
					return
				}
			}
		})
		if !slices.Equal(names, want) {
			t.Errorf("%s: the directory holds %v, want %v", run.name, names, want)
		}
		// What a run that died half way leaves: the next run removes it.
		if err := os.WriteFile(filepath.Join(dir, ".natstoken-1234"), []byte("half"), 0o400); err != nil {
			t.Fatal(err)
		}
	}
}

// Running as another user, as the kubelet runs the init container.
const (
	envNonRootDir = "NATSTOKEN_TEST_DIR"
	nonRootUser   = 65532
)

// asNonRoot returns the directory the calling test works in, and whether
// it is to run here. Not root, it runs here in a new directory. As root, it
// runs the test again in a process of user nonRootUser, over an empty
// directory made as the kubelet makes an emptyDir (root's, mode 0777),
// fails the test if that run fails, and says not to run here.
func asNonRoot(t *testing.T) (string, bool) {
	t.Helper()
	if dir := os.Getenv(envNonRootDir); dir != "" {
		return dir, true // the run as nonRootUser
	}
	if os.Geteuid() != 0 {
		return t.TempDir(), true
	}
	// The test binary, where the other user can run it (go test's build
	// directory is root's alone), and the emptyDir.
	base, err := os.MkdirTemp("", "natstoken-nonroot-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	dir := filepath.Join(base, "emptydir")
	bin := filepath.Join(base, "natstoken.test")
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil { // past the umask
		t.Fatal(err)
	}
	if err := copyFile(os.Args[0], bin); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Dir = base
	cmd.Env = append(os.Environ(), envNonRootDir+"="+dir, "TMPDIR="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nonRootUser, Gid: nonRootUser}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("as user %d: %v\n%s", nonRootUser, err, out)
	}
	if !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("as user %d, the test did not pass:\n%s", nonRootUser, out)
	}
	t.Logf("passed as user %d", nonRootUser)
	return "", false
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
