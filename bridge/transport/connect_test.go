package transport

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"go.uber.org/zap/zaptest"
)

// tlsFiles writes a CA and a server certificate for 127.0.0.1 to dir.
func tlsFiles(t *testing.T, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"}, IsCA: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, _ := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "nats"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	keyDER, _ := x509.MarshalECPrivateKey(key)
	write := func(name, typ string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("server.pem", "CERTIFICATE", der), write("server-key.pem", "EC PRIVATE KEY", keyDER)
}

// TestConnectWithTokenAndTLS: a NATS that requires TLS and a token is
// reached with the secret directory's token and CA, and refused without.
func TestConnectWithTokenAndTLS(t *testing.T) {
	caFile, certFile, keyFile := tlsFiles(t, t.TempDir())
	tlsConfig, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: certFile, KeyFile: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, Authorization: "s3cret",
		TLSConfig: tlsConfig, TLS: true, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	defer srv.Shutdown()
	if !srv.ReadyForConnections(5 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	url := srv.ClientURL()
	logger := zaptest.NewLogger(t).Sugar()

	secrets := t.TempDir()
	for name, content := range map[string]string{SecretToken: "s3cret\n", SecretCA: ""} {
		if content == "" {
			raw, _ := os.ReadFile(caFile)
			content = string(raw)
		}
		if err := os.WriteFile(filepath.Join(secrets, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	sec, err := SecurityFromDir(secrets)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(sec.Using, ","); got != "token,TLS" {
		t.Errorf("using %q, want token,TLS", got)
	}
	nc, err := Connect(url, "test", sec, logger, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	deadline := time.Now().Add(5 * time.Second)
	for !nc.IsConnected() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !nc.IsConnected() {
		t.Fatalf("not connected with the token and CA: %v", nc.LastError())
	}
	if _, err := nc.TLSConnectionState(); err != nil {
		t.Errorf("connection without TLS: %v", err)
	}

	// Without the secret: no TLS, no token; refused.
	bare, err := Connect(url, "bare", Security{}, logger, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close()
	// It retries in the background; for half a second it must never connect.
	for range 50 {
		if bare.IsConnected() {
			t.Fatal("connected without credentials")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestSecurityFromDir(t *testing.T) {
	write := func(t *testing.T, files ...string) string {
		dir := t.TempDir()
		for _, f := range files {
			if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	for name, tc := range map[string]struct {
		dir     func(*testing.T) string
		using   string
		wantErr bool
	}{
		"no directory":                {dir: func(*testing.T) string { return "" }, using: ""},
		"a missing directory":         {dir: func(t *testing.T) string { return filepath.Join(t.TempDir(), "none") }, using: ""},
		"an empty secret":             {dir: func(t *testing.T) string { return write(t) }, using: ""},
		"user and password":           {dir: func(t *testing.T) string { return write(t, SecretUser, SecretPassword) }, using: "user and password"},
		"a user without the password": {dir: func(t *testing.T) string { return write(t, SecretUser) }, wantErr: true},
		"a certificate without a key": {dir: func(t *testing.T) string { return write(t, SecretCA, SecretCert) }, wantErr: true},
		"mutual TLS and a token":      {dir: func(t *testing.T) string { return write(t, SecretToken, SecretCA, SecretCert, SecretKey) }, using: "token,TLS,client certificate"},
		"a creds file wins":           {dir: func(t *testing.T) string { return write(t, SecretCreds, SecretToken) }, using: "credentials file"},
	} {
		t.Run(name, func(t *testing.T) {
			sec, err := SecurityFromDir(tc.dir(t))
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if got := strings.Join(sec.Using, ","); err == nil && got != tc.using {
				t.Errorf("using %q, want %q", got, tc.using)
			}
		})
	}
}
