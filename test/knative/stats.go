package knative

import (
	"slices"
	"time"
)

// Percentile is the nearest-rank q-quantile of unsorted durations (0 for
// none).
func Percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}
