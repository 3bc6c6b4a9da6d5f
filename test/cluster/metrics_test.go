package cluster

import "testing"

func TestSumSamples(t *testing.T) {
	text := []byte(`# TYPE istio_aux_proxyquit_events_total counter
istio_aux_proxyquit_events_total{outcome="quit",type="a"} 3
istio_aux_proxyquit_events_total{outcome="quit",type="b"} 2
istio_aux_proxyquit_events_total{outcome="wait",type="a"} 7
# TYPE calls_seconds histogram
calls_seconds_bucket{name="w",le="+Inf"} 4
calls_seconds_sum{name="w"} 0.5
calls_seconds_count{name="w"} 4
calls_seconds_bucket{name="x",le="+Inf"} 1
calls_seconds_sum{name="x"} 9
calls_seconds_count{name="x"} 1
`)
	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"istio_aux_proxyquit_events_total", nil, 12},
		{"istio_aux_proxyquit_events_total", []string{`outcome="quit"`}, 5},
		{"istio_aux_proxyquit_events_total", []string{`outcome="quit"`, `type="b"`}, 2},
		{"calls_seconds_sum", []string{`name="w"`}, 0.5},
		{"calls_seconds_count", []string{`name="w"`}, 4},
		{"calls_seconds_count", nil, 5},
		{"absent_total", nil, 0},
	} {
		got, err := SumSamples(text, tc.name, tc.labels...)
		if err != nil || got != tc.want {
			t.Errorf("SumSamples(%s, %v) = %v, %v; want %v", tc.name, tc.labels, got, err, tc.want)
		}
	}
	if _, err := SumSamples([]byte("not { metrics"), "x"); err == nil {
		t.Error("no error for text that is not an exposition")
	}
}
