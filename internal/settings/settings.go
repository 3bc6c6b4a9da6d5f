// Package settings reads ConfigMap config-istio-aux for the bridge and the
// function, and follows it while they run, as the webhook (knative.dev/pkg's
// configmap watcher) follows it: one way to change a setting, applied within
// seconds, never silently ignored until a restart. The environment gives the
// starting values (a local run has no ConfigMap); a key the ConfigMap holds
// overrides it, and removing the key brings the environment's value back.
package settings

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/istio-aux/istio-aux/internal/env"
	"github.com/istio-aux/istio-aux/pkg/decision"
)

// Keys of config-istio-aux read here (the webhook reads mode).
const (
	KeySidecars    = "sidecars"
	KeyQuitNative  = "quit-native"
	KeyQuitCommand = "quit-command"
	KeyResync      = "resync-period"
	KeyNATSURL     = "nats-url"
)

// Defaults.
const (
	DefaultQuitCommand = "pilot-agent request POST quitquitquit"
	DefaultResync      = 5 * time.Minute
)

// MinResync is JetStream's duplicate window, which a resync must outlast:
// inside it a resync is dropped as a duplicate and could retry nothing
// (bridge/transport.DuplicateWindow; a bridge test keeps the two equal).
const MinResync = 2 * time.Minute

// Settings are what config-istio-aux says to the bridge and the function.
type Settings struct {
	// Decision: the extra sidecars and quit-native (bridge and function).
	Decision decision.Options
	// QuitCommand is the argv exec'd in istio-proxy (function).
	QuitCommand []string
	// Resync is how often the watcher re-lists its cache (bridge).
	Resync time.Duration
	// NATSURL is where events go; only a restart applies a change
	// (Follower.Restart).
	NATSURL string
}

// String is the settings as their keys, for logs and Events.
func (s Settings) String() string {
	return fmt.Sprintf("%s=%q %s=%v %s=%q %s=%v", KeySidecars, strings.Join(s.Decision.ExtraSidecars, ","), KeyQuitNative, s.Decision.QuitNative,
		KeyQuitCommand, strings.Join(s.QuitCommand, " "), KeyResync, s.Resync)
}

// Defaults are the settings with no environment and no ConfigMap.
func Defaults() Settings {
	return Settings{QuitCommand: strings.Fields(DefaultQuitCommand), Resync: DefaultResync}
}

// envOf is the environment variable of each key FromEnv reads: the
// starting values (config/ sets none of them since the components follow
// the ConfigMap; the suites' processes and local runs do).
var envOf = map[string]*env.Var{KeySidecars: env.Sidecars, KeyQuitNative: env.QuitNative, KeyQuitCommand: env.QuitCommand, KeyResync: env.Resync}

// FromEnv is Defaults overridden by the environment variables lookup
// (os.LookupEnv) finds; a set but unusable value is an error naming it.
func FromEnv(lookup env.Lookup) (Settings, error) {
	data := map[string]string{}
	for key, v := range envOf {
		if s, ok := v.In(lookup); ok {
			data[key] = s
		}
	}
	s, errs := Apply(Defaults(), Defaults(), data)
	for i, err := range errs {
		// Say the variable, not the key.
		var ke *KeyError
		if errors.As(err, &ke) {
			errs[i] = fmt.Errorf("%s=%q: %w", envOf[ke.Key].Name, ke.Value, ke.Err)
		}
	}
	return s, errors.Join(errs...)
}

// KeyError is a value of one key that cannot be used.
type KeyError struct {
	Key, Value string
	Err        error
}

// Error names the key and quotes its value, or the value's start when it is
// long: the message goes into a log line and an Event, whatever the size of
// the value.
func (e *KeyError) Error() string {
	if len(e.Value) > maxQuoted {
		return fmt.Sprintf("%s: %q… (%d bytes): %v", e.Key, strings.ToValidUTF8(e.Value[:maxQuoted], ""), len(e.Value), e.Err)
	}
	return fmt.Sprintf("%s: %q: %v", e.Key, e.Value, e.Err)
}

// maxQuoted bounds the part of a value an error quotes.
const maxQuoted = 64

func (e *KeyError) Unwrap() error { return e.Err }

// Apply reads data (a ConfigMap's) key by key: a key absent takes base's
// value (the environment's), a usable value its own, and an unusable one
// keeps prev's value and is returned as a *KeyError, so that one typo
// neither stops the other keys nor changes what was in force.
func Apply(prev, base Settings, data map[string]string) (Settings, []error) {
	s := base
	var errs []error
	bad := func(key string, err error) {
		errs = append(errs, &KeyError{Key: key, Value: data[key], Err: err})
	}
	if v, ok := data[KeySidecars]; ok {
		if names, err := decision.ParseSidecars(v); err != nil {
			bad(KeySidecars, err)
			s.Decision.ExtraSidecars = prev.Decision.ExtraSidecars
		} else {
			s.Decision.ExtraSidecars = names
		}
	}
	if v, ok := data[KeyQuitNative]; ok && strings.TrimSpace(v) != "" {
		if b, err := strconv.ParseBool(strings.TrimSpace(v)); err != nil {
			bad(KeyQuitNative, errors.New("want true or false"))
			s.Decision.QuitNative = prev.Decision.QuitNative
		} else {
			s.Decision.QuitNative = b
		}
	}
	if v, ok := data[KeyQuitCommand]; ok {
		if argv := strings.Fields(v); len(argv) == 0 {
			bad(KeyQuitCommand, fmt.Errorf("empty: remove the key for the default %q", DefaultQuitCommand))
			s.QuitCommand = prev.QuitCommand
		} else {
			s.QuitCommand = argv
		}
	}
	if v, ok := data[KeyResync]; ok && strings.TrimSpace(v) != "" {
		d, err := time.ParseDuration(strings.TrimSpace(v))
		switch {
		case err != nil:
			bad(KeyResync, errors.New("want a duration such as 5m"))
			s.Resync = prev.Resync
		case d <= MinResync:
			// The resync is what retries a quit lost downstream; one
			// inside the dedup window (or none) would never.
			bad(KeyResync, fmt.Errorf("must exceed the %v duplicate window: the resync retries quits lost downstream", MinResync))
			s.Resync = prev.Resync
		default:
			s.Resync = d
		}
	}
	if v, ok := data[KeyNATSURL]; ok {
		s.NATSURL = strings.TrimSpace(v)
	}
	return s, errs
}
