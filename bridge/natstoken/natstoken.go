// Package natstoken fills in the credential of istio-aux's own NATS
// (config/nats): the Secret istio-aux-nats ships without data, and the NATS
// pod's init container generates a random token into it on the first start.
// nats-server reads the token from the Secret, the bridge and the
// dispatchers from files their own init container copied from it (Copy,
// which a second run of the init container over the same files repeats);
// nobody else has it, so nothing else can connect
// (TestRow3AttackerIsRefused). Applying config/nats
// again leaves the filled-in data alone: the shipped Secret names no keys.
//
// A token must be one nats-server's configuration reads back as itself:
// config/nats puts it in as an environment variable ($NATS_TOKEN), whose
// value the parser reads as a value of its own, so that "-Rc..." is a bad
// number and "5-wf..." a bad date, and the server exits at once. About one
// base64url token in sixty is such a token (TestGeneratedTokensAreRead).
package natstoken

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/conf"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"

	"github.com/istio-aux/istio-aux/bridge/transport"
)

// Secrets reads and writes Secrets of one namespace.
type Secrets interface {
	Get(ctx context.Context, name string) (*corev1.Secret, error)
	Update(ctx context.Context, s *corev1.Secret) error
}

// tokenBytes is the token's entropy: 256 bits.
const tokenBytes = 32

// Readable says why nats-server's configuration would not read token back
// as itself from an environment variable, or nil if it would.
func Readable(token string) error {
	m, err := conf.Parse("token=" + token)
	if err != nil {
		return err
	}
	if v, ok := m["token"].(string); !ok || v != token {
		return fmt.Errorf("read as %v (%T)", m["token"], m["token"])
	}
	return nil
}

// generate returns a random token of tokenBytes that nats-server reads.
func generate() (string, error) {
	for {
		raw := make([]byte, tokenBytes)
		if _, err := rand.Read(raw); err != nil {
			return "", err
		}
		if token := base64.RawURLEncoding.EncodeToString(raw); Readable(token) == nil {
			return token, nil
		}
	}
}

// What Ensure did.
const (
	Kept      = ""
	Generated = "generated"
	Replaced  = "replaced"
)

// Ensure gives Secret name a token (key transport.SecretToken) unless it has
// one nats-server reads, and reports what it did: Kept, Generated, or
// Replaced (the Secret held a token nats-server cannot
// read, as one in sixty of those generated before Readable was checked
// are: the server never started with it, but the pods that copied it, the
// bridge's and the dispatchers', need a restart to copy the new one).
// Another pod filling it at the same time (a conflict) is fine: the token
// it wrote is kept.
func Ensure(ctx context.Context, s Secrets, name string) (string, error) {
	for range 5 {
		secret, err := s.Get(ctx, name)
		if err != nil {
			return "", fmt.Errorf("reading Secret %s (config/nats creates it, empty): %w", name, err)
		}
		did := Generated
		if old := secret.Data[transport.SecretToken]; len(old) > 0 {
			if Readable(string(old)) == nil {
				return Kept, nil
			}
			did = Replaced
		}
		token, err := generate()
		if err != nil {
			return "", err
		}
		secret = secret.DeepCopy()
		if secret.Data == nil {
			secret.Data = map[string][]byte{}
		}
		secret.Data[transport.SecretToken] = []byte(token)
		switch err := s.Update(ctx, secret); {
		case err == nil:
			return did, nil
		case apierrors.IsConflict(err):
			continue // read it again: someone else may have filled it
		default:
			return "", fmt.Errorf("writing the token into Secret %s: %w", name, err)
		}
	}
	return "", fmt.Errorf("Secret %s kept changing under the token's write", name)
}

// RESTSecrets are the Secrets of namespace through a core/v1 REST client
// (internal/kube's).
func RESTSecrets(c rest.Interface, namespace string) Secrets {
	return restSecrets{c: c, namespace: namespace}
}

type restSecrets struct {
	c         rest.Interface
	namespace string
}

func (r restSecrets) Get(ctx context.Context, name string) (*corev1.Secret, error) {
	s := &corev1.Secret{}
	return s, r.c.Get().Namespace(r.namespace).Resource("secrets").Name(name).Do(ctx).Into(s)
}

func (r restSecrets) Update(ctx context.Context, s *corev1.Secret) error {
	return r.c.Put().Namespace(r.namespace).Resource("secrets").Name(s.Name).Body(s).Do(ctx).Error()
}

// Copy makes dir a copy of Secret name's data, as a Secret volume would be:
// one file per key, readable by its owner only (the init container and the
// container that reads the files run as the same user: both images' user),
// and no other file. It waits, reading the Secret every poll, while the
// Secret exists without data (config/nats's, before its NATS pod filled in
// the token). A Secret that does not exist means no credentials: dir is
// left empty. It is what the bridge's and the dispatchers' init container
// runs: a Secret volume mounted before the token was filled in stays empty
// for minutes, as the kubelet refreshes it only on a later sync of the pod.
//
// The kubelet runs init containers again over the emptyDir it kept (a new
// sandbox, a node reboot), so Copy runs over the files of an earlier run,
// whose mode refuses their owner a write: each file is written beside its
// name and renamed over it (which needs the directory writable, not the
// file), so that a reader never sees a file half written, and a token that
// changed, or a key that went, is not left behind.
func Copy(ctx context.Context, s Secrets, name, dir string, poll time.Duration) (keys int, err error) {
	for {
		secret, err := s.Get(ctx, name)
		switch {
		case apierrors.IsNotFound(err):
			return 0, mirror(dir, nil)
		case err != nil:
			return 0, fmt.Errorf("reading Secret %s: %w", name, err)
		case len(secret.Data) > 0:
			return len(secret.Data), mirror(dir, secret.Data)
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("Secret %s still has no data (is config/nats's NATS pod running?): %w", name, ctx.Err())
		case <-time.After(poll):
		}
	}
}

// fileMode is the mode of the files Copy writes: their reader runs as
// their writer.
const fileMode = 0o400

// tempPrefix starts the names of files being written; one left by a run
// that died half way is removed by the next.
const tempPrefix = ".natstoken-"

// mirror makes the regular files of dir exactly data's keys and values.
func mirror(dir string, data map[string][]byte) error {
	for key, value := range data {
		// The API server admits only such keys; a path would write elsewhere.
		if !filepath.IsLocal(key) || filepath.Base(key) != key || strings.HasPrefix(key, tempPrefix) {
			return fmt.Errorf("Secret key %q is not a file name", key)
		}
		if err := replaceFile(dir, key, value); err != nil {
			return err
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if _, keep := data[e.Name()]; keep || !e.Type().IsRegular() {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("removing %s, which the Secret no longer has: %w", e.Name(), err)
		}
	}
	return nil
}

// replaceFile writes value to a new file in dir and renames it to name, in
// place of the file of that name if there is one.
func replaceFile(dir, name string, value []byte) (err error) {
	f, err := os.CreateTemp(dir, tempPrefix+"*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	if _, err = f.Write(value); err != nil {
		return err
	}
	if err = f.Chmod(fileMode); err != nil {
		return err
	}
	// On disk (an emptyDir without medium: Memory), a crash must not leave
	// an empty file under the name after the rename.
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(f.Name(), filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	return nil
}
