package failures

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// suite is a test file whose tests fail the ways the e2e suites do:
// parallel subtests interleaving their logs, one failing after a long
// multi-line log, a parent failing only through its subtest, and a test
// failing on its own with t.Fatal.
const suite = `package suite

import (
	"strings"
	"testing"
)

func TestFaults(t *testing.T) {
	for _, name := range []string{"quiet", "loud", "broken"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for i := range 20 {
				t.Logf("%s: step %d", name, i)
			}
			if name == "broken" {
				t.Logf("logs of the bridge:\n%s", strings.Repeat("  a line\n", 50))
				t.Errorf("broken: quits resumed 71.5s after the fault, want within 30s")
			}
		})
	}
}

func TestFatal(t *testing.T) {
	t.Log("before")
	t.Fatal("the NATS stream is not whole again")
}

func TestPasses(t *testing.T) { t.Log("fine") }
`

// goTestV runs the real go test -v on a package of the test's holding
// suite and returns its output.
func goTestV(t *testing.T, src string) []byte {
	t.Helper()
	dir := t.TempDir()
	for name, data := range map[string]string{
		"go.mod":        "module suite\n\ngo 1.24\n",
		"suite_test.go": src,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "test", "-count=1", "-v", "-parallel", "3", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off")
	out, _ := cmd.CombinedOutput() // it fails: that is the point
	if !bytes.Contains(out, []byte("--- FAIL")) {
		t.Fatalf("go test did not run the suite:\n%s", out)
	}
	return out
}

func TestDigestNamesEachFailedLeafAndItsLastMessages(t *testing.T) {
	out := goTestV(t, suite)
	var b strings.Builder
	if err := Digest(bytes.NewReader(out), &b, Options{PerTest: 2, Width: 80, Lines: 30}); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	want := "FAIL TestFaults/broken\n" +
		"  suite_test.go:16: logs of the bridge: [+50 lines]\n" +
		"  suite_test.go:17: broken: quits resumed 71.5s after the fault, want within 30s\n" +
		"FAIL TestFatal\n" +
		"  suite_test.go:24: before\n" +
		"  suite_test.go:25: the NATS stream is not whole again\n"
	if got != want {
		t.Errorf("digest:\n%s\nwant:\n%s\nof:\n%s", got, want, out)
	}
}

func TestDigestOfAPassingRunIsEmpty(t *testing.T) {
	out := []byte("=== RUN   TestPasses\n    suite_test.go:3: fine\n--- PASS: TestPasses (0.00s)\nPASS\n")
	var b strings.Builder
	if err := Digest(bytes.NewReader(out), &b, Options{PerTest: 4, Width: 80, Lines: 30}); err != nil {
		t.Fatal(err)
	}
	if b.Len() != 0 {
		t.Errorf("digest of a passing run: %q, want nothing", b.String())
	}
}

func TestDigestIsBounded(t *testing.T) {
	var in strings.Builder
	for _, name := range []string{"TestA", "TestB", "TestC"} {
		in.WriteString("=== RUN   " + name + "\n")
		in.WriteString("    a_test.go:1: " + strings.Repeat("x", 500) + "\n")
		in.WriteString("--- FAIL: " + name + " (0.00s)\n")
	}
	var b strings.Builder
	if err := Digest(strings.NewReader(in.String()), &b, Options{PerTest: 4, Width: 40, Lines: 4}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 4 || lines[3] != "(3 more lines)" {
		t.Errorf("digest bounded to 4 lines: %q", lines)
	}
	if l := len([]rune(lines[1])); l != 42 { // two spaces, then 40
		t.Errorf("line cut to %d runes, want 42: %q", l, lines[1])
	}
}
