package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/istio-aux/istio-aux/test/cluster"
)

// The TF_CONFIG the training operator v1.9.4 gives worker 0 of the seed's
// TFJob (notes: pkg/controller.v1/tensorflow).
const seedTFConfig = `{"cluster":{"worker":["mnist-worker-0.demo.svc:2222","mnist-worker-1.demo.svc:2222"]},"task":{"type":"worker","index":0},"environment":"cloud"}`

func TestGroupFor(t *testing.T) {
	cases := map[string]struct {
		args    []string
		env     map[string]string
		want    group
		wantErr string
	}{
		"seed tfjob worker 0": {args: []string{"-u", "mnist.py"}, env: map[string]string{"TF_CONFIG": seedTFConfig},
			want: group{self: "mnist-worker-0.demo.svc:2222", listen: ":2222", dial: []string{"mnist-worker-1.demo.svc:2222"}, expect: 1}},
		"tfjob without TF_CONFIG": {args: []string{"mnist.py"}, wantErr: "TF_CONFIG is not set"},
		"tfjob index outside": {args: []string{"mnist.py"}, env: map[string]string{"TF_CONFIG": strings.Replace(seedTFConfig, `"index":0`, `"index":2`, 1)},
			wantErr: "not in the cluster"},
		"tfjob bad json": {args: []string{"mnist.py"}, env: map[string]string{"TF_CONFIG": "{"}, wantErr: "TF_CONFIG"},
		"unknown script": {args: []string{"-u", "other.py"}, wantErr: `unknown script "other.py"`},
		"no script":      {args: []string{"-u"}, wantErr: "no script"},
		"pytorchjob master": {args: []string{"train.py"}, env: map[string]string{"MASTER_ADDR": "ddp-master-0", "MASTER_PORT": "23456", "RANK": "0", "WORLD_SIZE": "3"},
			want: group{self: "rank-0", listen: ":23456", expect: 2}},
		"pytorchjob worker": {args: []string{"train.py"}, env: map[string]string{"MASTER_ADDR": "ddp-master-0", "MASTER_PORT": "23456", "RANK": "1", "WORLD_SIZE": "2"},
			want: group{self: "rank-1", dial: []string{"ddp-master-0:23456"}}},
		"trainjob node (PET_ names)": {args: []string{"-u", "train.py"}, env: map[string]string{"PET_MASTER_ADDR": "train-node-0-0.train", "PET_MASTER_PORT": "29500", "PET_NODE_RANK": "1", "PET_NNODES": "2"},
			want: group{self: "rank-1", dial: []string{"train-node-0-0.train:29500"}}},
		"rank outside the world": {args: []string{"train.py"}, env: map[string]string{"MASTER_ADDR": "m", "MASTER_PORT": "1", "RANK": "2", "WORLD_SIZE": "2"}, wantErr: "want 0 <= rank < size"},
		"no master":              {args: []string{"train.py"}, env: map[string]string{"RANK": "0", "WORLD_SIZE": "2"}, wantErr: "want all three"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			g, err := groupFor(tc.args, func(k string) string { return tc.env[k] })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(g, tc.want) {
				t.Errorf("group = %+v, want %+v", g, tc.want)
			}
		})
	}
}

func TestWaitForArgs(t *testing.T) {
	host, tries, err := waitForArgs([]string{"ddp-master-0", "--tries=7"})
	if err != nil || host != "ddp-master-0" || tries != 7 {
		t.Errorf("got %q %d %v", host, tries, err)
	}
	for _, bad := range [][]string{nil, {"--tries=0"}, {"h", "--tries=x"}, {"h", "extra"}} {
		if _, _, err := waitForArgs(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	if code := waitFor("name.invalid", 1, time.Millisecond); code != 1 {
		t.Errorf("waitFor an unresolvable name: exit %d, want 1", code)
	}
	if code := waitFor("localhost", 1, time.Millisecond); code != 0 {
		t.Errorf("waitFor localhost: exit %d, want 0", code)
	}
}

// Three TF workers on loopback join each other although they start at
// different times, and a torch master waits for its two workers.
func TestRendezvous(t *testing.T) {
	ports, err := cluster.FreePorts(4)
	if err != nil {
		t.Fatal(err)
	}
	addr := func(p int) string { return fmt.Sprintf("127.0.0.1:%d", p) }
	workers := []string{addr(ports[0]), addr(ports[1]), addr(ports[2])}
	var groups []group
	for i, self := range workers {
		g := group{self: self, listen: fmt.Sprintf("127.0.0.1:%d", ports[i]), expect: 2}
		for _, w := range workers {
			if w != self {
				g.dial = append(g.dial, w)
			}
		}
		groups = append(groups, g)
	}
	master := addr(ports[3])
	groups = append(groups,
		group{self: "rank-0", listen: master, expect: 2},
		group{self: "rank-1", dial: []string{master}},
		group{self: "rank-2", dial: []string{master}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(groups))
	for i, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * 300 * time.Millisecond) // staggered starts, as pods start
			errs[i] = rendezvous(ctx, g)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("%s: %v", groups[i].self, err)
		}
	}
}

// A member whose peers never come gives up at its deadline, naming them.
func TestRendezvousTimesOut(t *testing.T) {
	ports, err := cluster.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	g := group{self: "w0", listen: fmt.Sprintf("127.0.0.1:%d", ports[0]), dial: []string{fmt.Sprintf("127.0.0.1:%d", ports[1])}, expect: 1}
	err = rendezvous(ctx, g)
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1") {
		t.Fatalf("err = %v, want a timeout naming the peer", err)
	}
}

// A failing attempt fails before joining the group; a good one joins it
// after the download.
func TestRunJoinsAfterTheDownload(t *testing.T) {
	ready := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer ready.Close()
	var joined []int
	attempt := 0
	cfg := config{needsNetwork: true, datasetURL: ready.URL, exitCodes: []int{1, 0}, attemptFile: t.TempDir() + "/n",
		join: func() error { joined = append(joined, attempt); return nil }}
	for attempt = 1; attempt <= 2; attempt++ {
		if got := run(cfg, ready.Client(), func(time.Duration) {}); got != cfg.exitCode(attempt) {
			t.Errorf("attempt %d exited %d", attempt, got)
		}
	}
	if !reflect.DeepEqual(joined, []int{2}) {
		t.Errorf("joined in attempts %v, want only the second", joined)
	}
	cfg.join = func() error { return fmt.Errorf("peer gone") }
	if got := run(cfg, ready.Client(), func(time.Duration) {}); got != 1 {
		t.Errorf("a failed join exited %d, want 1", got)
	}
}
