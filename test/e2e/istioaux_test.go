//go:build e2e

package e2e

import (
	"context"
	"sync"
	"testing"

	"github.com/istio-aux/istio-aux/test/istioaux"
)

var (
	auxOnce sync.Once
	aux     *istioaux.IstioAux
	auxErr  error
)

// withIstioAux starts the webhook and the bridge once for the whole run
// (tests before the first call run without istio-aux).
func withIstioAux(t *testing.T) *istioaux.IstioAux {
	t.Helper()
	auxOnce.Do(func() { aux, auxErr = istioaux.Start(context.Background(), env, logOut) })
	if auxErr != nil {
		t.Fatalf("starting istio-aux: %v", auxErr)
	}
	return aux
}

func stopIstioAux() {
	if aux != nil {
		_ = aux.Stop()
	}
}
