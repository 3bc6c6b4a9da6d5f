package cluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// SumSamples sums the samples of metric name (a histogram's name_sum or
// name_count included) in a Prometheus text exposition whose labels include
// every `key="value"` given; 0 when there are none.
func SumSamples(text []byte, name string, labels ...string) (float64, error) {
	want := map[string]string{}
	for _, l := range labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			return 0, fmt.Errorf("label %q is not key=\"value\"", l)
		}
		want[k] = strings.Trim(v, `"`)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		return 0, fmt.Errorf("parsing metrics: %w", err)
	}
	family, part := families[name], ""
	for _, suffix := range []string{"_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); family == nil && ok {
			family, part = families[base], suffix
		}
	}
	if family == nil {
		return 0, nil
	}
	sum := 0.0
	for _, m := range family.GetMetric() {
		if matches(m, want) {
			sum += value(m, part)
		}
	}
	return sum, nil
}

func matches(m *dto.Metric, want map[string]string) bool {
	found := 0
	for _, l := range m.GetLabel() {
		if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
			found++
		}
	}
	return found == len(want)
}

// value is a sample's value: a counter's, gauge's or untyped one's, or a
// histogram's or summary's sum or count.
func value(m *dto.Metric, part string) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	case m.Histogram != nil && part == "_sum":
		return m.Histogram.GetSampleSum()
	case m.Histogram != nil && part == "_count":
		return float64(m.Histogram.GetSampleCount())
	case m.Summary != nil && part == "_sum":
		return m.Summary.GetSampleSum()
	case m.Summary != nil && part == "_count":
		return float64(m.Summary.GetSampleCount())
	}
	return 0
}

// Scrape sums the samples of metric name at a /metrics URL whose labels
// include every `key="value"` given; 0 when there are none.
func Scrape(ctx context.Context, url, name string, labels ...string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	return SumSamples(body, name, labels...)
}
