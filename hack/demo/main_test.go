package main

import (
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
)

// TestCleanupOutlivesABrokenPipe: what main relies on when its output goes
// through a pipe whose reader is gone (`make run | tee`, Ctrl-C): with
// SIGPIPE ignored, a write to stdout fails instead of killing the process,
// which then finishes its cleanup. The child is this test binary.
func TestCleanupOutlivesABrokenPipe(t *testing.T) {
	if marker := os.Getenv("LOCAL_TEST_CHILD"); marker != "" {
		if os.Getenv("LOCAL_TEST_IGNORE") == "1" {
			signal.Ignore(syscall.SIGPIPE)
		}
		for range 3 {
			os.Stdout.WriteString("stopping the cluster\n")
		}
		_ = os.WriteFile(marker, []byte("cleaned up"), 0o644)
		os.Exit(0)
	}
	for _, ignore := range []bool{false, true} {
		marker := filepath.Join(t.TempDir(), "done")
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		r.Close() // the reader is gone before the child writes
		cmd := exec.Command(os.Args[0], "-test.run=^TestCleanupOutlivesABrokenPipe$")
		cmd.Env = append(os.Environ(), "LOCAL_TEST_CHILD="+marker, map[bool]string{true: "LOCAL_TEST_IGNORE=1", false: "LOCAL_TEST_IGNORE=0"}[ignore])
		cmd.Stdout = w
		err = cmd.Run()
		w.Close()
		_, statErr := os.Stat(marker)
		if ignore && (err != nil || statErr != nil) {
			t.Errorf("with SIGPIPE ignored: %v, marker %v; want the cleanup finished", err, statErr)
		}
		if !ignore && statErr == nil {
			t.Errorf("without ignoring SIGPIPE the child finished its cleanup: the test no longer shows what main guards against")
		}
	}
}
