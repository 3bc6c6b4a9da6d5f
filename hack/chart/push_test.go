package main

import "testing"

// TestPlainHTTP: the chart goes over plain HTTP exactly where the images
// before it did (go-containerregistry's rule), so a release to the
// harness's registry on a private address pushes both, and a public
// registry is never spoken to in the clear.
func TestPlainHTTP(t *testing.T) {
	for repo, want := range map[string]bool{
		"127.0.0.1:5000/istio-aux/charts": true,
		"localhost:5000/charts":           true,
		"10.87.0.1:5000/istio-aux/charts": true,
		"192.168.1.20/charts":             true,
		"ghcr.io/istio-aux/charts":        false,
		"registry.example.com:5000/x":     false,
		"8.8.8.8:5000/charts":             false,
	} {
		if got := plainHTTP(repo); got != want {
			t.Errorf("plainHTTP(%q) = %v, want %v", repo, got, want)
		}
	}
}
