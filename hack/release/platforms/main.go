// Command platforms reads an image index (its manifest, as `crane
// manifest` prints it) on stdin and prints its platforms, OS/ARCH sorted and
// space-separated; it fails on a manifest that is not an index.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
)

func main() {
	var idx struct {
		MediaType string `json:"mediaType"`
		Manifests []struct {
			Platform *struct {
				OS           string `json:"os"`
				Architecture string `json:"architecture"`
			} `json:"platform"`
		} `json:"manifests"`
	}
	if err := json.NewDecoder(os.Stdin).Decode(&idx); err != nil {
		fmt.Fprintln(os.Stderr, "platforms:", err)
		os.Exit(1)
	}
	if !strings.HasSuffix(idx.MediaType, "image.index.v1+json") && !strings.HasSuffix(idx.MediaType, "manifest.list.v2+json") {
		fmt.Fprintf(os.Stderr, "platforms: %q is not an image index\n", idx.MediaType)
		os.Exit(1)
	}
	var ps []string
	for _, m := range idx.Manifests {
		if m.Platform != nil && m.Platform.OS != "unknown" {
			ps = append(ps, m.Platform.OS+"/"+m.Platform.Architecture)
		}
	}
	slices.Sort(ps)
	fmt.Println(strings.Join(ps, " "))
}
