// Command kubectl-istio_aux is the kubectl plugin `kubectl istio-aux`
// (kubectl finds a plugin by its name on PATH, "-" in the command being "_"
// in the file name):
//
//	kubectl istio-aux explain POD...   why istio-aux does what it does to pods
//	kubectl istio-aux check            whether the install is healthy
//	kubectl istio-aux version          the plugin's build and the installed components'
//
// Install it with `go install github.com/istio-aux/istio-aux/cmd/kubectl-istio_aux@latest`.
// Its commands, flags, output and exit codes are package kubectl's (the
// top-level kubectl/ folder); docs/kubectl-plugin.md describes them.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/istio-aux/istio-aux/kubectl"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := kubectl.Main(ctx, os.Args[1:], os.Stdout, os.Stderr, kubectl.Connect)
	stop()
	os.Exit(code)
}
