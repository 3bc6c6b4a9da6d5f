// Command floorwebhook is the admission floor for test/bench
// (docs/bench.md): the least a mutating webhook can do. It reads an
// AdmissionReview only as far as the request's UID and answers every
// request with the same one-operation JSON patch istio-aux's webhook sends
// a bench pod, with no framework, logging, metrics or tracing.
//
// Env: CERT_FILE and KEY_FILE (PEM), ADDR (host:port). It serves HTTP/1.1
// over TLS, as knative.dev/pkg's webhook does by default, until SIGTERM.
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/types"
)

// patch is what istio-aux's webhook answers for a bench pod (which has
// annotations but no proxy.istio.io/config).
var patch = []byte(`[{"op":"add","path":"/metadata/annotations/proxy.istio.io~1config","value":"holdApplicationUntilProxyStarts: true"}]`)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	err := run(ctx, os.Getenv("ADDR"), os.Getenv("CERT_FILE"), os.Getenv("KEY_FILE"))
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "floorwebhook:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, addr, certFile, keyFile string) error {
	if addr == "" || certFile == "" || keyFile == "" {
		return errors.New("ADDR, CERT_FILE and KEY_FILE are required")
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /mutate", mutate)
	srv := &http.Server{
		Addr:              addr,
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		// A non-nil, empty map turns HTTP/2 off, as knative.dev/pkg does.
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServeTLS(certFile, keyFile) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(shutdown)
	}
}

// review is as much of an AdmissionReview as an answer needs.
type review struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Request    *struct {
		UID types.UID `json:"uid"`
	} `json:"request"`
}

func mutate(w http.ResponseWriter, r *http.Request) {
	var in review
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 8<<20)).Decode(&in); err != nil || in.Request == nil {
		http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
		return
	}
	pt := admissionv1.PatchTypeJSONPatch
	out := admissionv1.AdmissionReview{
		Response: &admissionv1.AdmissionResponse{UID: in.Request.UID, Allowed: true, PatchType: &pt, Patch: patch},
	}
	out.APIVersion, out.Kind = in.APIVersion, in.Kind
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(&out); err != nil {
		fmt.Fprintln(os.Stderr, "floorwebhook: writing the response:", err)
	}
}
