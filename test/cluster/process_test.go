package cluster

import "testing"

// Ports picked one after another, before anything binds them, must differ.
func TestFreePortNeverRepeats(t *testing.T) {
	seen := map[int]bool{}
	for range 200 {
		p, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
}
