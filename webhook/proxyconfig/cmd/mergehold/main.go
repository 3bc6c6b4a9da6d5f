// Command mergehold is the webhook's side of hack/tools/istio's differential
// test (agree.FuzzAgreesWithIstio): for each proxy config it reads on stdin,
// a JSON string on a line of its own, it writes proxyconfig.MergeHold's
// answer on stdout as a JSON object on a line of its own. It runs in its own
// process because the test's module builds Istio's code, and Istio's
// dependencies, at the versions istiod is built with, which the webhook's
// module does not share.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/istio-aux/istio-aux/webhook/proxyconfig"
)

// Answer is MergeHold's result for one config.
type Answer struct {
	Merged  string `json:"merged"`
	Changed bool   `json:"changed"`
	Error   string `json:"error,omitempty"`
	// Limit: the error is a *proxyconfig.LimitError.
	Limit bool `json:"limit,omitempty"`
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 64<<10), 16<<20)
	out := bufio.NewWriter(os.Stdout)
	enc := json.NewEncoder(out)
	for in.Scan() {
		var config string
		if err := json.Unmarshal(in.Bytes(), &config); err != nil {
			fmt.Fprintln(os.Stderr, "mergehold: a line that is not a JSON string:", err)
			os.Exit(2)
		}
		merged, changed, err := proxyconfig.MergeHold(config)
		a := Answer{Merged: merged, Changed: changed}
		if err != nil {
			var le *proxyconfig.LimitError
			a.Error, a.Limit = err.Error(), errors.As(err, &le)
		}
		if err := enc.Encode(a); err != nil || out.Flush() != nil {
			os.Exit(1)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "mergehold:", err)
		os.Exit(1)
	}
}
