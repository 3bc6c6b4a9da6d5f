package cluster

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"unicode"
)

// ProcessLog is where a test binary sends the output of the processes it
// starts: stderr when the environment variable verboseEnv is set, otherwise
// the file name in the temp dir (announced on stderr, so a failure can be
// read after the run). close releases the file.
func ProcessLog(name, verboseEnv string) (w io.Writer, close func()) {
	if os.Getenv(verboseEnv) != "" {
		return os.Stderr, func() {}
	}
	f, err := os.Create(filepath.Join(os.TempDir(), name))
	if err != nil {
		fmt.Fprintf(os.Stderr, "process logs discarded: %v\n", err)
		return io.Discard, func() {}
	}
	fmt.Fprintf(os.Stderr, "process logs: %s\n", f.Name())
	return f, func() { _ = f.Close() }
}

// LastLines is the last n lines of a process's output, for an error or a
// test log that should not quote all of it.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRightFunc(s, unicode.IsSpace), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
