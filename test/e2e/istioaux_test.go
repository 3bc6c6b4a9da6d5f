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
	auxErr  error
)

// withIstioAux starts the webhook and the bridge once for the whole run
// (tests before the first call run without istio-aux).
func withIstioAux(t testing.TB) *istioaux.IstioAux {
	t.Helper()
	auxOnce.Do(func() { auxErr = stack.StartIstioAux(context.Background()) })
	if auxErr != nil {
		t.Fatal(auxErr)
	}
	return stack.Aux
}
