// Package modroot finds the istio-aux module's root directory at run time.
package modroot

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// Module is the path go.mod declares at the root.
const Module = "github.com/istio-aux/istio-aux"

// Dir is the root of the istio-aux module: the nearest directory at or above
// the working directory whose go.mod declares Module (test binaries run in
// their package's directory, the harness's commands from the root). It does
// not depend on where the code was compiled: the builds use -trimpath, which
// leaves source paths relative. Outside the module it is the working
// directory, and what is looked up there is reported missing by its caller.
var Dir = sync.OnceValue(func() string {
	wd, err := os.Getwd()
	if err != nil {
		return "."
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if declares(filepath.Join(dir, "go.mod")) {
			return dir
		}
		if filepath.Dir(dir) == dir {
			return wd
		}
	}
})

// declares reports whether the go.mod at path is Module's.
func declares(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if f := strings.Fields(s.Text()); len(f) == 2 && f[0] == "module" {
			return f[1] == Module
		}
	}
	return false
}
