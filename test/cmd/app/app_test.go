package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestConfigExitCodePerAttempt(t *testing.T) {
	cases := map[string]struct {
		env     map[string]string
		attempt int
		want    int
		wantErr bool
	}{
		"default exits 0":        {attempt: 1, want: 0},
		"first attempt fails":    {env: map[string]string{"APP_EXIT_CODES": "1,0"}, attempt: 1, want: 1},
		"second attempt passes":  {env: map[string]string{"APP_EXIT_CODES": "1,0"}, attempt: 2, want: 0},
		"last code repeats":      {env: map[string]string{"APP_EXIT_CODES": "3, 4"}, attempt: 9, want: 4},
		"bad code":               {env: map[string]string{"APP_EXIT_CODES": "1,x"}, wantErr: true},
		"code out of range":      {env: map[string]string{"APP_EXIT_CODES": "256"}, wantErr: true},
		"bad duration":           {env: map[string]string{"APP_RUN_FOR": "2"}, wantErr: true},
		"bad network switch":     {env: map[string]string{"APP_NEEDS_NETWORK": "maybe"}, wantErr: true},
		"bad until":              {env: map[string]string{"APP_RUN_UNTIL": "tomorrow"}, wantErr: true},
		"network switch and run": {env: map[string]string{"APP_NEEDS_NETWORK": "false", "APP_RUN_FOR": "0s"}, attempt: 1, want: 0},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cfg, err := configFrom(func(k string) string { return tc.env[k] })
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if err == nil {
				if got := cfg.exitCode(tc.attempt); got != tc.want {
					t.Errorf("exitCode(%d) = %d, want %d", tc.attempt, got, tc.want)
				}
			}
		})
	}
}

// The attempt count survives runs through the file (an emptyDir in a pod).
func TestRunCountsAttemptsAndNeedsTheProxy(t *testing.T) {
	ready := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer ready.Close()
	cfg := config{needsNetwork: true, datasetURL: ready.URL, exitCodes: []int{1, 0},
		attemptFile: filepath.Join(t.TempDir(), "attempts")}
	noSleep := func(time.Duration) {}
	for i, want := range []int{1, 0, 0} {
		if got := run(cfg, ready.Client(), noSleep); got != want {
			t.Errorf("attempt %d exited %d, want %d", i+1, got, want)
		}
	}
	cfg.datasetURL = "http://127.0.0.1:1/refused"
	if got := run(cfg, ready.Client(), noSleep); got != 1 {
		t.Errorf("without a proxy the app exited %d, want 1", got)
	}
}

func TestProbeReachesAndReportsTheUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/missing" {
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	ctx := context.Background()
	if err := probe(ctx, srv.Client(), []string{srv.URL + "/", srv.Listener.Addr().String()}, time.Second); err != nil {
		t.Fatalf("probe of a live server: %v", err)
	}
	err := probe(ctx, srv.Client(), []string{srv.URL + "/missing", "127.0.0.1:1"}, 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "/missing") || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("probe err = %v, want both targets named", err)
	}
}

func TestTrainForUntilATime(t *testing.T) {
	now := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	cases := map[string]struct {
		env  map[string]string
		want time.Duration
	}{
		"run for":        {env: map[string]string{"APP_RUN_FOR": "3s"}, want: 3 * time.Second},
		"until wins":     {env: map[string]string{"APP_RUN_FOR": "3s", "APP_RUN_UNTIL": "2026-11-24T10:00:20Z"}, want: 20 * time.Second},
		"until passed":   {env: map[string]string{"APP_RUN_UNTIL": "2026-11-24T09:59:00Z"}, want: 0},
		"sub-second end": {env: map[string]string{"APP_RUN_UNTIL": "2026-11-24T10:00:00.5Z"}, want: 500 * time.Millisecond},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cfg, err := configFrom(func(k string) string { return tc.env[k] })
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.trainFor(now); got != tc.want {
				t.Errorf("trainFor = %s, want %s", got, tc.want)
			}
		})
	}
}
