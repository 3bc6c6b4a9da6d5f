package proxyquit

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/flowcontrol"
)

// limitedCluster puts a client-go rate limiter in front of every call, as
// the function's Kubernetes clients have one: the API budget a caller must
// not be able to spend.
type limitedCluster struct {
	next    Cluster
	limiter flowcontrol.RateLimiter
	calls   *atomic.Int64
}

func (c limitedCluster) wait(ctx context.Context) error {
	c.calls.Add(1)
	return c.limiter.Wait(ctx)
}

func (c limitedCluster) Pod(ctx context.Context, namespace, name, rv string) (*corev1.Pod, error) {
	if err := c.wait(ctx); err != nil {
		return nil, err
	}
	return c.next.Pod(ctx, namespace, name, rv)
}

func (c limitedCluster) Namespace(ctx context.Context, name string) (*corev1.Namespace, error) {
	if err := c.wait(ctx); err != nil {
		return nil, err
	}
	return c.next.Namespace(ctx, name)
}

func (c limitedCluster) Node(ctx context.Context, name string) (*corev1.Node, error) {
	if err := c.wait(ctx); err != nil {
		return nil, err
	}
	return c.next.Node(ctx, name)
}

func (c limitedCluster) DeletePod(ctx context.Context, namespace, name string, uid types.UID, resourceVersion string) error {
	if err := c.wait(ctx); err != nil {
		return err
	}
	return c.next.DeletePod(ctx, namespace, name, uid, resourceVersion)
}

func (c limitedCluster) Review(ctx context.Context, token string, audiences []string) (authenticationv1.TokenReviewStatus, error) {
	if err := c.wait(ctx); err != nil {
		return authenticationv1.TokenReviewStatus{}, err
	}
	return c.next.(Reviewer).Review(ctx, token, audiences)
}

// floodArm is one function, wired as NewFromConfig wires it (pods and
// namespaces on one rate limit, reviews on their own), over HTTP.
type floodArm struct {
	h               *harness
	url             string
	apiCalls, revws atomic.Int64
}

func newFloodArm(t *testing.T, pods int) *floodArm {
	t.Helper()
	var live []*corev1.Pod
	for i := range pods {
		live = append(live, donePod(fmt.Sprintf("job-%d", i), fmt.Sprintf("uid-%d", i)))
	}
	a := &floodArm{h: newHarness(t, DefaultConfig(), optedIn, live...)}
	base := ClientCluster{Client: a.h.client}
	a.h.fn.cluster = reviewedApart{
		Cluster: NewNamespaceCache(limitedCluster{next: base, calls: &a.apiCalls,
			limiter: flowcontrol.NewTokenBucketRateLimiter(clientQPS, clientBurst)}),
		reviews: limitedCluster{next: base, calls: &a.revws, limiter: flowcontrol.NewTokenBucketRateLimiter(authQPS, authBurst)},
	}
	a.h.fn.auth.review = a.h.fn.cluster.(Reviewer)
	// An exec takes what one through the API server to a kubelet takes.
	a.h.exec.hook = func(ctx context.Context, _ execCall) (ExecOutput, error) {
		select {
		case <-time.After(30 * time.Millisecond):
		case <-ctx.Done():
		}
		return ExecOutput{}, ctx.Err()
	}
	srv := httptest.NewServer(a.h.fn.HTTPHandler(context.Background(), prometheus.NewRegistry()))
	t.Cleanup(srv.Close)
	a.url = srv.URL
	return a
}

// quit posts the event of the done pod job-i with the dispatcher's token
// and returns how long the answer took.
func (a *floodArm) quit(t *testing.T, client *http.Client, i int) time.Duration {
	t.Helper()
	e := newEvent(t, donePod(fmt.Sprintf("job-%d", i), fmt.Sprintf("uid-%d", i)))
	req, _ := http.NewRequest(http.MethodPost, a.url, strings.NewReader(string(e.Data())))
	for k, v := range map[string]string{"Content-Type": "application/json", "ce-specversion": "1.0", "ce-type": e.Type(),
		"ce-id": e.ID(), "ce-source": e.Source(), "ce-subject": e.Subject(), "Authorization": "Bearer " + dispatcherToken} {
		req.Header.Set(k, v)
	}
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	if resp.StatusCode != http.StatusOK || string(body) != string(OutcomeQuit) {
		t.Fatalf("legitimate quit of job-%d: %d %q", i, resp.StatusCode, body)
	}
	return took
}

// junk returns, in turn, a new random string and a forged token (every
// claim right, signed by a key that is not the cluster's).
func junk(i int) string {
	if i%2 == 0 {
		b := make([]byte, 48)
		_, _ = rand.Read(b)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	return forged[i%len(forged)]
}

var forged = func() []string {
	var out []string
	for range 16 {
		out = append(out, signToken(tokenSpec{key: otherKey, expires: time.Now().Add(time.Hour + time.Duration(len(out))*time.Second)}))
	}
	return out
}()

// TestJunkCallersDoNotSlowQuits is row 2 of the README's attacks: 300
// callers, each sending a new junk bearer token every 100 ms (3,000
// requests a second: random strings and forged tokens), at one function,
// while the dispatcher quits pods at it and, at the same moments, at an
// idle twin in the same process. The quits at the flooded function must
// take no longer: the median of the pairs' ratios within 1.2x (p50, p90
// and p99 are printed). Junk must cost no API call at all.
func TestJunkCallersDoNotSlowQuits(t *testing.T) {
	if testing.Short() {
		t.Skip("floods a server for seconds")
	}
	const samples, callers = 60, 300
	idle, flooded := newFloodArm(t, samples), newFloodArm(t, samples)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var refused, other atomic.Int64
	transport := &http.Transport{MaxIdleConnsPerHost: callers}
	defer transport.CloseIdleConnections()
	junkClient := &http.Client{Transport: transport, Timeout: 10 * time.Second}
	for c := range callers {
		wg.Go(func() {
			tick := time.NewTicker(100 * time.Millisecond) // the callers' pace
			defer tick.Stop()
			for i := c; ; i += callers {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, flooded.url, strings.NewReader("{}"))
				req.Header.Set("Authorization", "Bearer "+junk(i))
				resp, err := junkClient.Do(req)
				if err != nil {
					continue // the test ending
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusUnauthorized {
					refused.Add(1)
				} else {
					other.Add(1)
				}
			}
		})
	}
	// The flood is on before the first sample.
	for deadline := time.Now().Add(10 * time.Second); refused.Load() < callers; {
		if time.Now().After(deadline) {
			t.Fatalf("the flood did not start: %d refused", refused.Load())
		}
		time.Sleep(10 * time.Millisecond) // polling, with a deadline
	}
	// Each sample quits one pod at both at the same moment, so that this
	// shared host's hiccups fall on both alike.
	idleClient, floodedClient := &http.Client{}, &http.Client{}
	var without, with []time.Duration
	for i := range samples {
		var a, b time.Duration
		var pair sync.WaitGroup
		pair.Go(func() { a = idle.quit(t, idleClient, i) })
		pair.Go(func() { b = flooded.quit(t, floodedClient, i) })
		pair.Wait()
		without, with = append(without, a), append(with, b)
	}
	cancel()
	wg.Wait()

	pct := func(ds []time.Duration, p float64) time.Duration {
		s := slices.Clone(ds)
		slices.Sort(s)
		return s[min(len(s)-1, int(p*float64(len(s))))]
	}
	t.Logf("%d callers sending junk tokens: %d refused (401), %d other answers", callers, refused.Load(), other.Load())
	t.Logf("legitimate quits (exec 30 ms), %d each, in pairs at the same moment:", samples)
	for _, p := range []float64{.5, .9, .99} {
		a, b := pct(without, p), pct(with, p)
		t.Logf("  p%02.0f: idle %v, flooded %v: %.2fx", p*100, a.Round(100*time.Microsecond), b.Round(100*time.Microsecond), float64(b)/float64(a))
	}
	t.Logf("API calls: idle %d (reviews %d), flooded %d (reviews %d)", idle.apiCalls.Load(), idle.revws.Load(), flooded.apiCalls.Load(), flooded.revws.Load())
	if other.Load() != 0 {
		t.Errorf("%d junk requests were not refused with 401", other.Load())
	}
	if flooded.apiCalls.Load() != idle.apiCalls.Load() || flooded.revws.Load() > idle.revws.Load()+1 {
		t.Errorf("junk tokens cost API calls: flooded %d (reviews %d), idle %d (reviews %d)",
			flooded.apiCalls.Load(), flooded.revws.Load(), idle.apiCalls.Load(), idle.revws.Load())
	}
	// The gate: the median of each pair's ratio, which no hiccup of this
	// shared host moves; the percentiles above are for the record.
	ratios := make([]time.Duration, len(with))
	for i := range with {
		ratios[i] = 1000 * with[i] / without[i]
	}
	if paired := float64(pct(ratios, .5)) / 1000; paired > 1.2 {
		t.Errorf("flooded quits took %.2fx as long as idle ones (median of the pairs), want ≤ 1.2x", paired)
	} else {
		t.Logf("median of the pairs' ratios: %.2fx", paired)
	}
}
