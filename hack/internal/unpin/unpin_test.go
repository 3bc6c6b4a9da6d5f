package unpin

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUnpin: config/'s NATS StatefulSet pins an fsGroup; the variant has
// none, nor any pinned user or group anywhere, and keeps everything else
// (the other securityContext fields, every document, in order).
func TestUnpin(t *testing.T) {
	var in bytes.Buffer
	files, err := filepath.Glob(filepath.Join("..", "..", "..", "config", "nats", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("config/nats: %v", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		in.Write(b)
		in.WriteString("\n---\n")
	}
	if !strings.Contains(in.String(), "fsGroup:") {
		t.Fatal("config/nats pins no fsGroup: this test no longer tests anything")
	}
	extra := "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  securityContext: {runAsUser: 5, runAsNonRoot: true}\n  containers:\n  - name: c\n    securityContext: {runAsGroup: 7, readOnlyRootFilesystem: true}\n"
	in.WriteString(extra)
	var out bytes.Buffer
	if err := Unpin(&in, &out); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, pin := range pinned {
		if strings.Contains(got, pin+":") {
			t.Errorf("the variant still pins %s:\n%s", pin, got)
		}
	}
	for _, kept := range []string{"runAsNonRoot: true", "readOnlyRootFilesystem: true", "seccompProfile:", "kind: StatefulSet", "kind: Pod"} {
		if !strings.Contains(got, kept) {
			t.Errorf("the variant lost %q", kept)
		}
	}
}
