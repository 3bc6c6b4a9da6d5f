package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"
)

// config is the app's environment, parsed once.
type config struct {
	needsNetwork bool
	datasetURL   string
	runFor       time.Duration
	until        time.Time
	exitCodes    []int
	attemptFile  string
	// join, when set (python mode), joins the training group after the
	// download; an attempt due to fail fails before it.
	join func() error
}

// configFrom reads the APP_* variables (see the package comment).
func configFrom(getenv func(string) string) (config, error) {
	cfg := config{
		needsNetwork: true,
		datasetURL:   "http://127.0.0.1:15021/healthz/ready",
		runFor:       time.Second,
		exitCodes:    []int{0},
		attemptFile:  getenv("APP_ATTEMPT_FILE"),
	}
	if v := getenv("APP_NEEDS_NETWORK"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return cfg, fmt.Errorf("APP_NEEDS_NETWORK: %w", err)
		}
		cfg.needsNetwork = b
	}
	if v := getenv("APP_DATASET_URL"); v != "" {
		cfg.datasetURL = v
	}
	if v := getenv("APP_RUN_FOR"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return cfg, fmt.Errorf("APP_RUN_FOR %q: want a duration like 2s", v)
		}
		cfg.runFor = d
	}
	if v := getenv("APP_RUN_UNTIL"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return cfg, fmt.Errorf("APP_RUN_UNTIL %q: want a time like 2026-11-24T10:00:00Z", v)
		}
		cfg.until = t
	}
	if v := getenv("APP_EXIT_CODES"); v != "" {
		cfg.exitCodes = nil
		for _, s := range strings.Split(v, ",") {
			c, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || c < 0 || c > 255 {
				return cfg, fmt.Errorf("APP_EXIT_CODES %q: want codes 0-255 separated by commas", v)
			}
			cfg.exitCodes = append(cfg.exitCodes, c)
		}
	}
	return cfg, nil
}

// trainFor is how long an attempt started at now trains: until the
// APP_RUN_UNTIL time if set (nothing once it has passed), else APP_RUN_FOR.
func (c config) trainFor(now time.Time) time.Duration {
	if c.until.IsZero() {
		return c.runFor
	}
	return max(c.until.Sub(now), 0)
}

// exitCode is the code of attempt n (1-based); the last code repeats.
func (c config) exitCode(n int) int {
	if n > len(c.exitCodes) {
		n = len(c.exitCodes)
	}
	return c.exitCodes[n-1]
}

// nextAttempt increments the attempt count kept in file and returns it;
// without a file every run is attempt 1.
func nextAttempt(file string) (int, error) {
	if file == "" {
		return 1, nil
	}
	n := 0
	b, err := os.ReadFile(file)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return 0, err
	default:
		if n, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
			return 0, fmt.Errorf("%s: %w", file, err)
		}
	}
	n++
	return n, os.WriteFile(file, []byte(strconv.Itoa(n)), 0o644)
}
