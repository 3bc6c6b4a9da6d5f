// Command failures prints, from a file of `go test -v` output, what each
// failed test logged last (package hack/internal/failures): hack/stages.sh
// runs it on a failed stage's output, after the stage times, where CI's
// kept tail shows it.
//
//	go run ./hack/failures [-per-test N] [-lines N] FILE
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/istio-aux/istio-aux/hack/internal/failures"
)

func main() {
	o := failures.Options{Width: 300}
	flag.IntVar(&o.PerTest, "per-test", 4, "the last `N` messages of each failed test")
	flag.IntVar(&o.Lines, "lines", 30, "at most `N` lines in all")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: failures [-per-test N] [-lines N] FILE")
		os.Exit(2)
	}
	if err := digest(flag.Arg(0), o); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func digest(path string, o failures.Options) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return failures.Digest(f, os.Stdout, o)
}
