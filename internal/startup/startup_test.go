package startup

import (
	"errors"
	"os"
	"os/exec"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// The child processes of the tests below: each runs one start-up and says
// what it saw on stdout.
func TestMain(m *testing.M) {
	switch os.Getenv("STARTUP_TEST_CHILD") {
	case "gc":
		Context(50)
		os.Stdout.WriteString(strconv.Itoa(debug.SetGCPercent(-1)))
		os.Exit(0)
	case "signal":
		ctx := Context(0)
		os.Stdout.WriteString("ready\n")
		<-ctx.Done()
		os.Stdout.WriteString("stopping\n")
		select {} // a shutdown that never ends, which a second signal cuts short
	case "fatal":
		Exit(zap.NewExample().Sugar(), "Bridge failed", os.ErrClosed)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func child(t *testing.T, mode string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), "STARTUP_TEST_CHILD="+mode), env...)
	return cmd
}

func TestContextSetsGOGCUnlessTheEnvironmentDoes(t *testing.T) {
	for env, want := range map[string]string{"": "50", "GOGC=200": "200"} {
		var extra []string
		if env != "" {
			extra = append(extra, env)
		}
		out, err := child(t, "gc", extra...).Output()
		if err != nil || string(out) != want {
			t.Errorf("with %q the GC percent is %q (%v), want %s", env, out, err, want)
		}
	}
}

// The first signal ends the context; the second ends the process.
func TestSecondSignalExits(t *testing.T) {
	cmd := child(t, "signal")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 2)
	go func() {
		buf := make([]byte, 64)
		var got string
		for {
			n, err := out.Read(buf)
			got += string(buf[:n])
			for strings.Contains(got, "\n") {
				line, rest, _ := strings.Cut(got, "\n")
				lines <- line
				got = rest
			}
			if err != nil {
				close(lines)
				return
			}
		}
	}()
	expect := func(want string) {
		t.Helper()
		select {
		case line := <-lines:
			if line != want {
				t.Fatalf("child said %q, want %q", line, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("child did not say %q", want)
		}
	}
	expect("ready")
	_ = cmd.Process.Signal(syscall.SIGTERM)
	expect("stopping")
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Errorf("child ended with %v, want exit status 1", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("a second SIGTERM did not end the child")
	}
}

func TestExit(t *testing.T) {
	out, err := child(t, "fatal").Output()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), `"msg":"Bridge failed"`) {
		t.Errorf("Exit with an error: %v, output %s", err, out)
	}
	core, logs := observer.New(zap.InfoLevel)
	logger := zap.New(core).Sugar()
	logger.Info("done")
	Exit(logger, "unused", nil)
	if logs.Len() != 1 {
		t.Errorf("Exit without an error logged %d lines", logs.Len())
	}
}
