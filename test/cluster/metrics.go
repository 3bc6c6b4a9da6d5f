package cluster

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// SumSamples sums the samples of metric name (a histogram's name_sum or
// name_count included) in a Prometheus text exposition whose labels include
// every `key="value"` given; 0 when there are none.
func SumSamples(text []byte, name string, labels ...string) (float64, error) {
	sum := 0.0
lines:
	for line := range bytes.Lines(text) {
		l := strings.TrimSpace(string(line))
		if !strings.HasPrefix(l, name+"{") && !strings.HasPrefix(l, name+" ") {
			continue
		}
		for _, want := range labels {
			if !strings.Contains(l, want) {
				continue lines
			}
		}
		f, err := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("metric line %q: %w", l, err)
		}
		sum += f
	}
	return sum, nil
}
