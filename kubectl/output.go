package kubectl

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
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

// printExplain prints each pod as a block of labelled lines.
func printExplain(w io.Writer, r explain.Report) {
	for i, p := range r.Pods {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "pod %s/%s: %s\n", p.Namespace, p.Name, p.Verdict)
		line(w, "opt-in", p.OptIn.Text)
		line(w, "proxy", p.Proxy+": "+proxyWords[p.Proxy])
		line(w, "hold", p.Hold.Text)
		line(w, "decision", p.Decision.Text)
		for _, a := range p.Apps {
			line(w, "", a.Text)
		}
		if len(p.Sidecars) > 0 {
			var s []string
			for _, c := range p.Sidecars {
				s = append(s, c.Name+" ("+c.Where+")")
			}
			line(w, "sidecars", strings.Join(s, ", ")+": not waited for")
		}
		line(w, "next", p.Next)
		if len(p.Events) == 0 {
			line(w, "events", "none from istio-aux")
		}
		label := "events"
		for _, e := range p.Events {
			line(w, label, fmt.Sprintf("%s %s: %s", e.Time.Format(time.RFC3339), e.Reason, e.Message))
			label = ""
		}
		for _, pr := range p.Problems {
			line(w, "PROBLEM", pr)
		}
		for _, c := range p.Checks {
			line(w, "check", c)
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintln(w, "note:", n)
	}
}

// line prints a labelled line, its label in a column.
func line(w io.Writer, label, text string) {
	if label != "" {
		label += ":"
	}
	fmt.Fprintf(w, "  %-10s %s\n", label, text)
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
	fmt.Fprintf(w, "install: %s\n", shapes[r.Shape])
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, it := range r.Items {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", strings.ToUpper(string(it.Status)), it.Name, it.Message)
		if it.Status != check.StatusOK && it.Command != "" {
			fmt.Fprintf(tw, "\t\t→ %s\n", it.Command)
		}
		if verbose {
			for _, v := range it.Values {
				fmt.Fprintf(tw, "\t\t  %s\n", v)
			}
		}
	}
	_ = tw.Flush() // into write's buffer, which does not fail
}
