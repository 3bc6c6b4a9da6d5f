//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/istio-aux/istio-aux/test/cluster"
	"github.com/istio-aux/istio-aux/test/poll"
)

func waitTCP(ctx context.Context, addr string, timeout time.Duration) error {
	return poll.Until(ctx, timeout, func(ctx context.Context) (bool, error) {
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return false, err
		}
		conn.Close()
		return true, nil
	})
}

// quitsByUID reads the stub pilot-agent's record, grouped by pod UID.
func quitsByUID(t *testing.T) map[string][]cluster.Quit {
	t.Helper()
	all, err := env.Quits()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]cluster.Quit{}
	for _, q := range all {
		out[q.UID] = append(out[q.UID], q)
	}
	return out
}

func quitCount(t *testing.T) int {
	t.Helper()
	all, err := env.Quits()
	if err != nil {
		t.Fatal(err)
	}
	return len(all)
}

// scrape sums the samples of metric name whose labels include every
// `key="value"` given; 0 when there are none.
func scrape(t *testing.T, url, name string, labels ...string) float64 {
	t.Helper()
	sum, err := cluster.Scrape(context.Background(), url, name, labels...)
	if err != nil {
		t.Fatalf("scraping %s: %v", url, err)
	}
	return sum
}

// table prints rows of two columns, aligned.
func table(w io.Writer, title string, rows [][2]string) {
	width := 0
	for _, r := range rows {
		width = max(width, len(r[0]))
	}
	fmt.Fprintf(w, "--- %s ---\n", title)
	for _, r := range rows {
		fmt.Fprintf(w, "%-*s  %s\n", width, r[0], r[1])
	}
}
