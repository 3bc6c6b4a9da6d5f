package modroot

import (
	"os"
	"path/filepath"
	"testing"
)

// From this package's directory (where go test runs it) the walk reaches
// the repository root, past hack/tools' own go.mod files' kind of module.
func TestDirIsTheModuleRoot(t *testing.T) {
	dir := Dir()
	if _, err := os.Stat(filepath.Join(dir, "test", "modroot", "modroot.go")); err != nil {
		t.Fatalf("Dir() = %s, not the istio-aux root: %v", dir, err)
	}
	if !declares(filepath.Join(dir, "go.mod")) {
		t.Fatalf("%s/go.mod does not declare %s", dir, Module)
	}
	if declares(filepath.Join(dir, "hack", "tools", "coredns", "go.mod")) {
		t.Fatal("a tools module's go.mod was taken for istio-aux's")
	}
}
