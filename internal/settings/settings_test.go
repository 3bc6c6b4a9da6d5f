package settings

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	"github.com/istio-aux/istio-aux/internal/env"
	"github.com/istio-aux/istio-aux/pkg/decision"
	"github.com/istio-aux/istio-aux/pkg/names"
	"github.com/istio-aux/istio-aux/pkg/slim"
)

func TestApply(t *testing.T) {
	prev := Defaults()
	prev.Decision.ExtraSidecars = []string{"vault-agent"}
	prev.Resync = 10 * time.Minute
	base := Defaults()
	for _, tc := range []struct {
		name    string
		data    map[string]string
		check   func(Settings) bool
		badKeys []string
	}{
		{"no ConfigMap: the base", nil, func(s Settings) bool {
			return s.Decision.ExtraSidecars == nil && s.Resync == DefaultResync && strings.Join(s.QuitCommand, " ") == DefaultQuitCommand
		}, nil},
		{"every key", map[string]string{KeySidecars: " fluent-bit, ,vault-agent ", KeyQuitNative: "true",
			KeyQuitCommand: " curl -sf -XPOST\thttp://127.0.0.1:15020/quitquitquit ", KeyResync: "7m", KeyNATSURL: " nats://a:4222,nats://b:4222 "},
			func(s Settings) bool {
				return slices.Equal(s.Decision.ExtraSidecars, []string{"fluent-bit", "vault-agent"}) && s.Decision.QuitNative &&
					slices.Equal(s.QuitCommand, []string{"curl", "-sf", "-XPOST", "http://127.0.0.1:15020/quitquitquit"}) &&
					s.Resync == 7*time.Minute && s.NATSURL == "nats://a:4222,nats://b:4222"
			}, nil},
		{"a key removed takes the base again", map[string]string{KeyQuitNative: "false"}, func(s Settings) bool {
			return s.Decision.ExtraSidecars == nil && s.Resync == DefaultResync
		}, nil},
		{"empty sidecars: none", map[string]string{KeySidecars: ""}, func(s Settings) bool { return s.Decision.ExtraSidecars == nil }, nil},
		{"bad values keep the previous ones, good ones still apply", map[string]string{
			KeySidecars: "Not_A_Name", KeyQuitNative: "yes please", KeyQuitCommand: "  ", KeyResync: "often", KeyNATSURL: "nats://c:4222"},
			func(s Settings) bool {
				return slices.Equal(s.Decision.ExtraSidecars, []string{"vault-agent"}) && !s.Decision.QuitNative &&
					strings.Join(s.QuitCommand, " ") == DefaultQuitCommand && s.Resync == 10*time.Minute && s.NATSURL == "nats://c:4222"
			}, []string{KeySidecars, KeyQuitNative, KeyQuitCommand, KeyResync}},
		{"a resync inside the dedup window", map[string]string{KeyResync: "2m"}, func(s Settings) bool { return s.Resync == 10*time.Minute }, []string{KeyResync}},
		{"a resync of 0 would never retry", map[string]string{KeyResync: "0s"}, func(s Settings) bool { return s.Resync == 10*time.Minute }, []string{KeyResync}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, errs := Apply(prev, base, tc.data)
			if !tc.check(got) {
				t.Errorf("Apply = %+v", got)
			}
			var bad []string
			for _, err := range errs {
				var ke *KeyError
				if !errors.As(err, &ke) {
					t.Fatalf("%v is no *KeyError", err)
				}
				bad = append(bad, ke.Key)
			}
			slices.Sort(bad)
			want := slices.Clone(tc.badKeys)
			slices.Sort(want)
			if !slices.Equal(bad, want) {
				t.Errorf("refused keys %v (%v), want %v", bad, errs, want)
			}
		})
	}
}

func TestFromEnvNamesTheVariable(t *testing.T) {
	s, err := FromEnv(func(k string) (string, bool) {
		v, ok := map[string]string{env.Sidecars.Name: "vault-agent", env.QuitNative.Name: "true", env.Resync.Name: "10m"}[k]
		return v, ok
	})
	if err != nil || !s.Decision.QuitNative || s.Resync != 10*time.Minute || len(s.Decision.ExtraSidecars) != 1 {
		t.Fatalf("FromEnv = %+v, %v", s, err)
	}
	for env, v := range map[string]string{env.Sidecars.Name: "Not_A_Name", env.QuitNative.Name: "yes please", env.QuitCommand.Name: " ", env.Resync.Name: "1m"} {
		_, err := FromEnv(func(k string) (string, bool) { return v, k == env })
		if err == nil || !strings.Contains(err.Error(), env) {
			t.Errorf("%s=%q: error %v, want one naming the variable", env, v, err)
		}
	}
}

func configMap(data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: names.ConfigMap, Namespace: "istio-aux"}, Data: data}
}

// TestFollower: every accepted change reaches Apply once; a refused value
// is said on the ConfigMap and changes nothing; nats-url restarts the
// process only when it changes while it runs; a deleted ConfigMap brings
// the environment's values back.
func TestFollower(t *testing.T) {
	rec := record.NewFakeRecorder(10)
	var applied []Settings
	restarts := 0
	base := Defaults()
	base.Decision.QuitNative = true // as if the environment said so
	f := &Follower{Component: "test", Instance: "pod-1", Base: base, Recorder: rec,
		Apply:   func(s Settings) { applied = append(applied, s) },
		Restart: func(string) { restarts++ }}
	f.cur = f.Base

	f.Observe(configMap(map[string]string{KeyNATSURL: "nats://a:4222"}))
	if len(applied) != 1 || applied[0].NATSURL != "nats://a:4222" || !applied[0].Decision.QuitNative || restarts != 0 {
		t.Fatalf("first read: applied %+v, %d restarts; want the URL over the base, no restart", applied, restarts)
	}
	f.Observe(configMap(map[string]string{KeyNATSURL: "nats://a:4222", KeySidecars: "vault-agent"}))
	if len(applied) != 2 || !slices.Equal(f.Current().Decision.ExtraSidecars, []string{"vault-agent"}) || restarts != 0 {
		t.Fatalf("sidecars: applied %d times, current %+v, %d restarts", len(applied), f.Current(), restarts)
	}
	events := func() (out []string) {
		for {
			select {
			case e := <-rec.Events:
				out = append(out, e)
			default:
				return out
			}
		}
	}
	if got := events(); len(got) != 1 || !strings.Contains(got[0], ReasonApplied) || !strings.Contains(got[0], `test pod-1 applies sidecars="vault-agent"`) {
		t.Errorf("events %q, want one %s per change while it runs (none for the first read), naming the replica and the values", got, ReasonApplied)
	}
	f.Observe(configMap(map[string]string{KeyNATSURL: "nats://a:4222", KeySidecars: "vault-agent", KeyQuitCommand: ""}))
	if len(applied) != 2 {
		t.Errorf("a refused value was applied: %+v", applied[len(applied)-1])
	}
	if got := events(); len(got) != 1 || !strings.Contains(got[0], ReasonRejected) || !strings.Contains(got[0], KeyQuitCommand) {
		t.Errorf("events %q, want one %s naming %s", got, ReasonRejected, KeyQuitCommand)
	}
	f.Observe(configMap(map[string]string{KeyNATSURL: "nats://b:4222", KeySidecars: "vault-agent"}))
	if restarts != 1 {
		t.Errorf("nats-url changed: %d restarts, want 1", restarts)
	}
	f.Observe(nil)
	if got := f.Current(); got.Decision.ExtraSidecars != nil || !got.Decision.QuitNative {
		t.Errorf("deleted ConfigMap: %+v, want the base", got)
	}
}

// TestSidecarsAreBounded: a sidecars value past slim.MaxSidecars names or
// decision.MaxSidecarsLen bytes is refused as any unusable value is (a
// SettingsRejected Event naming the bound, the previous list in force),
// and the Event quotes only the value's start. Unbounded, 1 MiB of names
// (144,960) made every decision of the bridge and the function cost 17 ms.
func TestSidecarsAreBounded(t *testing.T) {
	many := func(n int) string {
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("c%d", i)
		}
		return strings.Join(names, ",")
	}
	mib := many(144960)
	for name, tc := range map[string]struct {
		value, says string
	}{
		"1 MiB of names":    {mib, fmt.Sprintf("(%d bytes): %d bytes, more than %d: at most %d names are read", len(mib), len(mib), decision.MaxSidecarsLen, slim.MaxSidecars)},
		"one name too many": {many(slim.MaxSidecars + 1), fmt.Sprintf("more than %d names", slim.MaxSidecars)},
	} {
		t.Run(name, func(t *testing.T) {
			rec := record.NewFakeRecorder(10)
			f := &Follower{Component: "test", Instance: "pod-1", Base: Defaults(), Recorder: rec}
			f.cur = f.Base
			f.Observe(configMap(map[string]string{KeySidecars: "vault-agent"}))
			f.Observe(configMap(map[string]string{KeySidecars: tc.value}))
			if got := f.Current().Decision.ExtraSidecars; !slices.Equal(got, []string{"vault-agent"}) {
				t.Errorf("sidecars in force: %d names, want the previous one", len(got))
			}
			var rejected []string
			for len(rec.Events) > 0 {
				if e := <-rec.Events; strings.Contains(e, ReasonRejected) {
					rejected = append(rejected, e)
				}
			}
			if len(rejected) != 1 || !strings.Contains(rejected[0], tc.says) || len(rejected[0]) > 512 {
				t.Errorf("events %.600q, want one %s of at most 512 bytes saying %q", rejected, ReasonRejected, tc.says)
			}
		})
	}
	// Whatever the size, refusing costs little: the length is checked
	// before the value is split.
	start := time.Now()
	const n = 100
	for range n {
		Apply(Defaults(), Defaults(), map[string]string{KeySidecars: mib})
	}
	if per := time.Since(start) / n; per > 5*time.Millisecond {
		t.Errorf("refusing 1 MiB of sidecars took %v, want well under the 93 ms that parsing it took", per)
	}
}
