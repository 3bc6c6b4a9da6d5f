package dispatch

import (
	"testing"
	"time"
)

// TestBackoffs: the retries' delay doubles from BaseDelay per delivery up to
// MaxDelay, whichever dispatcher computes it; the consumer's restore waits
// double from restoreDelay up to maxRestoreDelay.
func TestBackoffs(t *testing.T) {
	d := &Dispatcher{o: Options{BaseDelay: time.Second, MaxDelay: time.Minute}}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, time.Minute, time.Minute}
	for i, w := range want {
		if got := d.delay(i + 1); got != w {
			t.Errorf("delay(%d) = %v, want %v", i+1, got, w)
		}
	}
	b := restoreBackoff()
	for i, w := range []time.Duration{restoreDelay, 2 * restoreDelay, 4 * restoreDelay, maxRestoreDelay, maxRestoreDelay} {
		if got := b.Step(); got != w {
			t.Errorf("restore wait %d = %v, want %v", i+1, got, w)
		}
	}
}
