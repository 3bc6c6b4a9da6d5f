// Command krew writes the krew plugin manifest (krew's index format,
// apiVersion krew.googlecontainertools.github.com/v1alpha2) of a release's
// plugin archives: one platform per archive, named
// kubectl-istio_aux_OS_ARCH.tar.gz, with its download address and SHA-256.
//
//	go run ./hack/release/krew -version vX.Y.Z -url BASE -dir DIR archive...
//
// hack/tools/krew's test checks what it writes with krew's own validation
// and installer.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// The manifest's shape, as krew's index package declares it.
type (
	plugin struct {
		APIVersion string            `json:"apiVersion"`
		Kind       string            `json:"kind"`
		Metadata   metav1.ObjectMeta `json:"metadata"`
		Spec       spec              `json:"spec"`
	}
	spec struct {
		Version          string     `json:"version"`
		Homepage         string     `json:"homepage"`
		ShortDescription string     `json:"shortDescription"`
		Description      string     `json:"description"`
		Caveats          string     `json:"caveats,omitempty"`
		Platforms        []platform `json:"platforms"`
	}
	platform struct {
		Selector metav1.LabelSelector `json:"selector"`
		URI      string               `json:"uri"`
		Sha256   string               `json:"sha256"`
		Files    []file               `json:"files"`
		Bin      string               `json:"bin"`
	}
	file struct {
		From string `json:"from"`
		To   string `json:"to"`
	}
)

var archiveName = regexp.MustCompile(`^kubectl-istio_aux_([a-z]+)_([a-z0-9]+)\.tar\.gz$`)

const description = `istio-aux makes Job-like workloads (Jobs, CronJobs, Kubeflow and Argo
steps) finish in an Istio mesh: its webhook holds the app until the proxy is
ready, and its function stops the proxy once the apps are done. This plugin
explains why a pod is or is not handled (explain), checks an install (check)
and prints the plugin's and the installed components' versions (version).`

func main() {
	version := flag.String("version", "", "the release's version, vX.Y.Z")
	url := flag.String("url", "", "where the release's archives are downloaded from")
	dir := flag.String("dir", ".", "the directory holding the archives")
	flag.Parse()
	m, err := manifest(*version, *url, *dir, flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "krew:", err)
		os.Exit(1)
	}
	os.Stdout.Write(m)
}

func manifest(version, url, dir string, archives []string) ([]byte, error) {
	if version == "" || url == "" || len(archives) == 0 {
		return nil, errors.New("usage: krew -version vX.Y.Z -url BASE [-dir DIR] archive...")
	}
	p := plugin{
		APIVersion: "krew.googlecontainertools.github.com/v1alpha2",
		Kind:       "Plugin",
		Metadata:   metav1.ObjectMeta{Name: "istio-aux"},
		Spec: spec{
			Version:          version,
			Homepage:         "https://github.com/istio-aux/istio-aux",
			ShortDescription: "Explain and check istio-aux: Jobs that finish in an Istio mesh",
			Description:      description,
		},
	}
	for _, a := range archives {
		m := archiveName.FindStringSubmatch(a)
		if m == nil {
			return nil, fmt.Errorf("%s: not kubectl-istio_aux_OS_ARCH.tar.gz", a)
		}
		sum, err := sha256File(filepath.Join(dir, a))
		if err != nil {
			return nil, err
		}
		bin := "kubectl-istio_aux"
		if m[1] == "windows" {
			bin += ".exe"
		}
		p.Spec.Platforms = append(p.Spec.Platforms, platform{
			Selector: metav1.LabelSelector{MatchLabels: map[string]string{"os": m[1], "arch": m[2]}},
			URI:      strings.TrimSuffix(url, "/") + "/" + a,
			Sha256:   sum,
			Files:    []file{{From: bin, To: "."}, {From: "LICENSE", To: "."}},
			Bin:      bin,
		})
	}
	return yaml.Marshal(p)
}

func sha256File(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
