package app

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/istio-aux/istio-aux/bridge/internal/testenv"
	"github.com/istio-aux/istio-aux/pkg/names"
)

// TestWithTimings: config-leader-election's keys set the watcher's Lease
// timings, a key left out keeps the default, and what client-go's elector
// would refuse is refused with the key named.
func TestWithTimings(t *testing.T) {
	def := DefaultElection()
	tests := map[string]struct {
		data    map[string]string
		want    [3]time.Duration // lease, renew, retry
		wantErr string
	}{
		"none: the defaults":      {nil, [3]time.Duration{15 * time.Second, 10 * time.Second, 2 * time.Second}, ""},
		"knative's _example only": {map[string]string{"_example": "lease-duration: 1s"}, [3]time.Duration{15 * time.Second, 10 * time.Second, 2 * time.Second}, ""},
		"all three": {map[string]string{KeyLeaseDuration: "60s", KeyRenewDeadline: "40s", KeyRetryPeriod: "10s"},
			[3]time.Duration{time.Minute, 40 * time.Second, 10 * time.Second}, ""},
		"one, the others default": {map[string]string{KeyLeaseDuration: "30s"}, [3]time.Duration{30 * time.Second, 10 * time.Second, 2 * time.Second}, ""},
		"not a duration":          {map[string]string{KeyRenewDeadline: "ten"}, [3]time.Duration{}, KeyRenewDeadline},
		"lease not past renew":    {map[string]string{KeyLeaseDuration: "10s"}, [3]time.Duration{}, KeyLeaseDuration + "=10s: want more than " + KeyRenewDeadline},
		"renew within the jitter": {map[string]string{KeyRetryPeriod: "9s"}, [3]time.Duration{}, KeyRenewDeadline + "=10s: want more than " + KeyRetryPeriod},
		"retry zero":              {map[string]string{KeyRetryPeriod: "0s"}, [3]time.Duration{}, KeyRetryPeriod + "=0s: want a positive duration"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := def.WithTimings(tc.data)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), names.LeaderElectionConfigMap) {
					t.Fatalf("WithTimings = %v, want an error naming %s and %q", err, names.LeaderElectionConfigMap, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if g := [3]time.Duration{got.LeaseDuration, got.RenewDeadline, got.RetryPeriod}; g != tc.want {
				t.Errorf("timings %v, want %v", g, tc.want)
			}
			if got.Lease != def.Lease {
				t.Errorf("Lease %q changed", got.Lease)
			}
		})
	}
}

type configMaps struct {
	cm  *corev1.ConfigMap
	err error
	ns  string
}

func (c *configMaps) ConfigMap(_ context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	c.ns = namespace + "/" + name
	return c.cm, c.err
}

// TestTimingsAtStart: the ConfigMap is read from the Lease's namespace; a
// missing one, or one the process may not read, leaves the defaults; a bad
// one stops the process.
func TestTimingsAtStart(t *testing.T) {
	ctx := testenv.Context(t)
	e := DefaultElection()
	e.Namespace = "istio-aux"
	gr := schema.GroupResource{Resource: "configmaps"}
	for name, r := range map[string]*configMaps{
		"missing":   {err: apierrors.NewNotFound(gr, names.LeaderElectionConfigMap)},
		"forbidden": {err: apierrors.NewForbidden(gr, names.LeaderElectionConfigMap, nil)},
	} {
		got, err := timingsAtStart(ctx, e, r)
		if err != nil || got != e {
			t.Errorf("%s: %+v, %v; want the defaults", name, got, err)
		}
		if r.ns != "istio-aux/"+names.LeaderElectionConfigMap {
			t.Errorf("%s: read %s", name, r.ns)
		}
	}
	got, err := timingsAtStart(ctx, e, &configMaps{cm: &corev1.ConfigMap{Data: map[string]string{KeyLeaseDuration: "45s"}}})
	if err != nil || got.LeaseDuration != 45*time.Second {
		t.Errorf("set: %+v, %v; want a 45s lease", got, err)
	}
	if _, err := timingsAtStart(ctx, e, &configMaps{cm: &corev1.ConfigMap{Data: map[string]string{KeyLeaseDuration: "5s"}}}); err == nil {
		t.Error("a lease shorter than the renew deadline was taken")
	}
}
