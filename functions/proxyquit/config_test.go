package proxyquit

import (
	"slices"
	"testing"
	"time"

	"k8s.io/client-go/tools/record"

	"github.com/istio-aux/istio-aux/internal/env"
	"github.com/istio-aux/istio-aux/internal/settings"
	"github.com/istio-aux/istio-aux/pkg/decision"
)

func TestConfigFromEnv(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		want    Config
		wantErr bool
	}{{
		name: "defaults",
		want: Config{Settings: settings.Settings{QuitCommand: []string{"pilot-agent", "request", "POST", "quitquitquit"}}, ExecTimeout: 10 * time.Second},
	}, {
		name: "everything set",
		env: map[string]string{
			env.Sidecars.Name:    " vault-agent, ,fluent-bit ",
			env.QuitCommand.Name: "  curl -sf -XPOST\thttp://127.0.0.1:15020/quitquitquit ",
			env.ExecTimeout.Name: "3s",
		},
		want: Config{
			Settings: settings.Settings{Decision: decision.Options{ExtraSidecars: []string{"vault-agent", "fluent-bit"}},
				QuitCommand: []string{"curl", "-sf", "-XPOST", "http://127.0.0.1:15020/quitquitquit"}},
			ExecTimeout: 3 * time.Second,
		},
	}, {
		name: "empty sidecars means none",
		env:  map[string]string{env.Sidecars.Name: ""},
		want: DefaultConfig(),
	}, {
		name:    "blank quit command",
		env:     map[string]string{env.QuitCommand.Name: "   "},
		wantErr: true,
	}, {
		name:    "timeout without unit",
		env:     map[string]string{env.ExecTimeout.Name: "10"},
		wantErr: true,
	}, {
		name:    "negative timeout",
		env:     map[string]string{env.ExecTimeout.Name: "-1s"},
		wantErr: true,
	}, {
		name:    "zero timeout",
		env:     map[string]string{env.ExecTimeout.Name: "0s"},
		wantErr: true,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := configFromLookup(func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			if !slices.Equal(got.Settings.Decision.ExtraSidecars, tc.want.Settings.Decision.ExtraSidecars) || !slices.Equal(got.Settings.QuitCommand, tc.want.Settings.QuitCommand) || got.ExecTimeout != tc.want.ExecTimeout {
				t.Errorf("config = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestConfigFromEnvReadsTheProcessEnvironment(t *testing.T) {
	t.Setenv(env.ExecTimeout.Name, "250ms")
	cfg, err := ConfigFromEnv()
	if err != nil || cfg.ExecTimeout != 250*time.Millisecond {
		t.Fatalf("ConfigFromEnv() = %+v, %v; want a 250ms timeout", cfg, err)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no command":    {ExecTimeout: time.Second},
		"no timeout":    {Settings: settings.Settings{QuitCommand: []string{"x"}}},
		"comma sidecar": {Settings: settings.Settings{QuitCommand: []string{"x"}, Decision: decision.Options{ExtraSidecars: []string{"a,b"}}}, ExecTimeout: time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := New(cfg, ClientCluster{}, &fakeExecer{}, record.NewFakeRecorder(1), nil); err == nil {
				t.Error("New accepted a bad config")
			}
		})
	}
}
