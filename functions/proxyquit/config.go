package proxyquit

import (
	"fmt"
	"strings"
	"time"

	"github.com/istio-aux/istio-aux/internal/env"
	"github.com/istio-aux/istio-aux/internal/settings"
)

// DefaultExecTimeout bounds one exec unless ISTIO_AUX_EXEC_TIMEOUT says
// (env.ExecTimeout, whose Default it is: a test holds the two equal).
// (The quit command's default is settings.DefaultQuitCommand: argv, not a
// shell line, since distroless proxy images have no shell, and pilot-agent
// is on every Istio proxy image.)
const DefaultExecTimeout = 10 * time.Second

// Config is what the function needs to know beyond its dependencies.
type Config struct {
	// Settings are config-istio-aux's keys as the process starts: the
	// quit decision's options and the argv exec'd in istio-proxy
	// (Function.SetSettings changes them while it runs).
	Settings settings.Settings
	// SystemNamespace (SYSTEM_NAMESPACE) holds config-istio-aux, which
	// NewFromConfig follows; "" follows nothing.
	SystemNamespace string
	// ExecTimeout bounds one exec, connection included.
	ExecTimeout time.Duration
	// Auth says who may call the function over HTTP (Handle, in-process,
	// is not affected).
	Auth Auth
}

// DefaultConfig is the configuration with no environment set.
func DefaultConfig() Config {
	return Config{
		Settings:    settings.Defaults(),
		ExecTimeout: DefaultExecTimeout,
		Auth:        Auth{Audiences: []string{DefaultAudience}, Callers: DefaultCallers},
	}
}

// ConfigFromEnv reads the ISTIO_AUX_* variables; unset ones keep their
// defaults. A value that is set but unusable is an error, so a typo stops the
// process at start instead of quitting proxies with the wrong command.
func ConfigFromEnv() (Config, error) {
	return configFromLookup(env.OS)
}

// configFromLookup reads the variables env lists for the function
// (env.ReadBy(env.ProxyQuit)), beside the settings' (internal/settings'
// FromEnv: the starting values of config-istio-aux's keys).
func configFromLookup(lookup env.Lookup) (Config, error) {
	cfg := DefaultConfig()
	var err error
	if cfg.Settings, err = settings.FromEnv(lookup); err != nil {
		return cfg, err
	}
	cfg.SystemNamespace, _ = env.SystemNamespace.In(lookup)
	switch v, _ := env.Auth.In(lookup); strings.ToLower(strings.TrimSpace(v)) {
	case "", "on":
	case "off":
		cfg.Auth.Disabled = true
	default:
		return cfg, fmt.Errorf("%s=%q: want on or off", env.Auth.Name, v)
	}
	if v, ok := env.AuthAudiences.In(lookup); ok {
		cfg.Auth.Audiences = list(v)
	}
	if v, ok := env.AuthCallers.In(lookup); ok {
		cfg.Auth.Callers = list(v)
	}
	if v, ok := env.ExecTimeout.In(lookup); ok {
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil {
			return cfg, fmt.Errorf("%s=%q: %w", env.ExecTimeout.Name, v, err)
		}
		if d <= 0 {
			return cfg, fmt.Errorf("%s=%q: must be positive", env.ExecTimeout.Name, v)
		}
		cfg.ExecTimeout = d
	}
	return cfg, cfg.Validate()
}

// Validate reports a configuration the function cannot work with.
func (c Config) Validate() error {
	if len(c.Settings.QuitCommand) == 0 {
		return fmt.Errorf("quit command is empty")
	}
	if c.ExecTimeout <= 0 {
		return fmt.Errorf("exec timeout %v must be positive", c.ExecTimeout)
	}
	if !c.Auth.Disabled && (len(c.Auth.Audiences) == 0 || len(c.Auth.Callers) == 0) {
		return fmt.Errorf("authentication needs an audience (%s) and callers (%s), or %s=off", env.AuthAudiences.Name, env.AuthCallers.Name, env.Auth.Name)
	}
	for _, s := range c.Settings.Decision.ExtraSidecars {
		if s == "" || strings.ContainsAny(s, " ,\t\n") {
			return fmt.Errorf("sidecar name %q is not a container name", s)
		}
	}
	return nil
}

// list splits a comma list, trimming blanks and dropping empty items.
func list(s string) []string {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}
