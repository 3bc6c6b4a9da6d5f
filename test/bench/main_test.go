//go:build e2e

package bench

import (
	"os"
	"testing"

	"github.com/istio-aux/istio-aux/test/realnode"
)

// TestMain runs the benchmarks inside a network namespace of their own
// where the machine can host a real node (TestBenchCompletion needs one);
// elsewhere they run as they are and that part skips, saying why.
func TestMain(m *testing.M) { os.Exit(realnode.RunInNetns(m.Run)) }
