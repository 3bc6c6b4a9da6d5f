package mesh

import (
	"context"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/istio-aux/istio-aux/test/cluster"
)

// Main is a suite's TestMain on a kwok stack: it starts the stack with o,
// its processes' output in /tmp/<logName> (echoed with $<verbose> set),
// lets ready finish the suite's own set-up, runs the tests and stops the
// stack. It returns the exit code for os.Exit.
func Main(m *testing.M, logName, verbose string, o Options, ready func(*Mesh, io.Writer) error) int {
	log, closeLog := cluster.ProcessLog(logName, verbose)
	defer closeLog()
	o.Log = log
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	stack, err := Start(ctx, o)
	if stack != nil {
		defer func() {
			if err := stack.Stop(); err != nil {
				fmt.Fprintln(os.Stderr, "stopping:", err)
			}
		}()
	}
	if err == nil {
		err = ready(stack, log)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the stack:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "stack up in %s (kubeconfig %s)\n", time.Since(start).Round(time.Millisecond), stack.Cluster.Kubeconfig())
	return m.Run()
}
