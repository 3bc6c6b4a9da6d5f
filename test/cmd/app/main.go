// Command app is the test workload of the real node (test/realnode), shaped
// like the reference demo's training worker: it first "downloads its
// dataset" through the pod's network, then trains for a while and exits.
//
//	app                  run as a worker (configured by the environment below)
//	app exit N           exit with code N at once (for `kubectl exec` tests)
//	app serve ADDR       answer HTTP 200 on ADDR (a Service's backend)
//	app probe TARGET...  reach each http:// URL or host:port through the
//	                     pod's DNS and network; exit 1 unless all answer
//
// Environment:
//
//	APP_NEEDS_NETWORK  "false" skips the download (default true)
//	APP_DATASET_URL    what the download GETs (default
//	                   http://127.0.0.1:15021/healthz/ready: Envoy's health
//	                   port in the pod, refused until the proxy is ready,
//	                   as the real download fails with "Network is
//	                   unreachable" before Istio's proxy is)
//	APP_RUN_FOR        how long one attempt trains, e.g. "2s" (default 1s)
//	APP_RUN_UNTIL      train until this time (RFC 3339) instead: Jobs
//	                   started apart end together, as a burst of
//	                   completions
//	APP_EXIT_CODES     exit code per attempt, e.g. "1,0": the first attempt
//	                   exits 1, every later one 0 (default "0")
//	APP_ATTEMPT_FILE   where attempts are counted. A container restart
//	                   starts from the image again, so the count must live
//	                   on a volume that outlives the container: mount an
//	                   emptyDir and point this into it. Unset, every run is
//	                   attempt 1.
//
// A failed download prints the error and exits 1 whatever the attempt.
package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/istio-aux/istio-aux/test/httpget"
)

func main() {
	// Installed as python (test/images.Python), it runs training scripts.
	if filepath.Base(os.Args[0]) == "python" {
		os.Exit(python(os.Args[1:], os.Getenv))
	}
	if len(os.Args) >= 2 {
		switch os.Args[1] {
		case "exit":
			code, err := strconv.Atoi(os.Args[len(os.Args)-1])
			if err != nil || len(os.Args) != 3 {
				fmt.Fprintln(os.Stderr, "app exit N:", err)
				os.Exit(2)
			}
			os.Exit(code)
		case "serve":
			if len(os.Args) != 3 {
				fmt.Fprintln(os.Stderr, "app serve ADDR")
				os.Exit(2)
			}
			fmt.Fprintln(os.Stderr, "app serve:", serve(os.Args[2]))
			os.Exit(1)
		case "probe":
			if err := probe(context.Background(), httpClient(), os.Args[2:], 30*time.Second); err != nil {
				fmt.Println("app probe:", err)
				os.Exit(1)
			}
			os.Exit(0)
		}
	}
	cfg, err := configFrom(os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "app:", err)
		os.Exit(2)
	}
	os.Exit(run(cfg, httpClient(), time.Sleep))
}

func httpClient() *http.Client { return &http.Client{Timeout: 5 * time.Second} }

// run is one attempt; it returns the exit code.
func run(cfg config, client *http.Client, sleep func(time.Duration)) int {
	attempt, err := nextAttempt(cfg.attemptFile)
	if err != nil {
		fmt.Println("app: counting attempts:", err)
		return 2
	}
	code := cfg.exitCode(attempt)
	fmt.Printf("app: attempt %d, will exit %d after %s\n", attempt, code, cfg.trainFor(time.Now()))
	if cfg.needsNetwork {
		if err := httpget.OK(context.Background(), client, cfg.datasetURL); err != nil {
			fmt.Println("app: downloading the dataset failed:", err)
			return 1
		}
		fmt.Println("app: dataset downloaded")
	}
	if cfg.join != nil {
		if code != 0 {
			fmt.Printf("app: exiting with %d before joining the training group\n", code)
			return code
		}
		if err := cfg.join(); err != nil {
			fmt.Println("app: joining the training group failed:", err)
			return 1
		}
	}
	const epochs = 3
	train := cfg.trainFor(time.Now())
	for i := 1; i <= epochs; i++ {
		sleep(train / epochs)
		fmt.Printf("app: epoch %d/%d done\n", i, epochs)
	}
	fmt.Printf("app: exiting with %d\n", code)
	return code
}
