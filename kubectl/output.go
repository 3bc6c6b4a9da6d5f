package kubectl

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/istio-aux/istio-aux/kubectl/check"
	"github.com/istio-aux/istio-aux/kubectl/explain"
)

// write prints report as JSON, or as text with text, in one write whose
// error is the caller's.
func write(w io.Writer, output string, report any, text func(io.Writer)) error {
	var buf bytes.Buffer
	if output == "json" {
		enc := json.NewEncoder(&buf)
		enc.SetIndent("", "  ")
		if err := enc.Encode(report); err != nil {
			return fmt.Errorf("encoding the report: %w", err)
		}
	} else {
		text(&buf)
	}
	if _, err := w.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	return nil
}

// printExplain prints each pod as a heading and its labelled lines.
func printExplain(w io.Writer, r explain.Report) {
	t := newText(w)
	for i, p := range r.Pods {
		if i > 0 {
			t.line()
		}
		t.line(fmt.Sprintf("pod %s/%s: %s", p.Namespace, p.Name, p.Verdict))
		t.labelled("opt-in", p.OptIn.Text)
		t.labelled("proxy", p.Proxy+": "+proxyWords[p.Proxy])
		t.labelled("hold", p.Hold.Text)
		t.labelled("decision", p.Decision.Text)
		for _, a := range p.Apps {
			t.labelled("", a.Text)
		}
		if len(p.Sidecars) > 0 {
			var s []string
			for _, c := range p.Sidecars {
				s = append(s, c.Name+" ("+c.Where+")")
			}
			t.labelled("sidecars", strings.Join(s, ", ")+": not waited for")
		}
		t.labelled("next", p.Next)
		if len(p.Events) == 0 {
			t.labelled("events", "none from istio-aux")
		}
		label := "events"
		for _, e := range p.Events {
			t.labelled(label, fmt.Sprintf("%s %s: %s", e.Time.Format(time.RFC3339), e.Reason, e.Message))
			label = ""
		}
		for _, pr := range p.Problems {
			t.labelled("PROBLEM", pr)
		}
		for _, c := range p.Checks {
			t.labelled("check", c)
		}
	}
	for _, n := range r.Notes {
		t.line("note: " + n)
	}
	t.flush()
}

// proxyWords say what each kind of proxy means for its quit.
var proxyWords = map[string]string{
	explain.ProxyClassic: "istio-proxy is a regular container, which runs until something quits it",
	explain.ProxyNative:  "istio-proxy is an init container with restartPolicy Always, which the kubelet stops after the apps",
	explain.ProxyNone:    "no istio-proxy",
}

// shapes say what each install shape is made of.
var shapes = map[string]string{
	check.ShapeConfig:     "config/ (webhook, bridge, NATS, the function as a Knative Service)",
	check.ShapeStandalone: "config/standalone/ (webhook, all-in-one)",
}

// printCheck prints one line per item, and under an item that is not OK
// the command that shows more.
func printCheck(w io.Writer, r check.Report, verbose bool) {
	t := newText(w)
	t.line("install: " + shapes[r.Shape])
	for _, it := range r.Items {
		t.line(strings.ToUpper(string(it.Status)), it.Name, it.Message)
		if it.Status != check.StatusOK && it.Command != "" {
			t.line("", "", "→ "+it.Command)
		}
		if verbose {
			for _, v := range it.Values {
				t.line("", "", "  "+v)
			}
		}
	}
	t.flush()
}
