package kubectl

import (
	"io"
	"strings"
	"text/tabwriter"
)

// text is the one writer of both reports' text form, explain's and
// check's: lines of cells, each cell but the last padded to its column
// (the cells of contiguous lines share columns; a line of one cell, a
// heading, ends them), written into write's buffer. Every cell is escaped
// on its way in: whatever of the cluster's a report quotes reaches the
// terminal as text (escape), and a tab or a newline in it cannot break
// the columns.
type text struct {
	tw *tabwriter.Writer
}

func newText(w io.Writer) *text {
	return &text{tw: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)}
}

// line writes one line of cells; no cell, an empty line.
func (t *text) line(cells ...string) {
	escaped := make([]string, len(cells))
	for i, c := range cells {
		escaped[i] = escape(c)
	}
	_, _ = io.WriteString(t.tw, strings.Join(escaped, "\t")+"\n") // into write's buffer, which does not fail
}

// labelled writes a labelled line: its label, indented, in a column, its
// value after it (no label: the value goes on under the line above's).
func (t *text) labelled(label, value string) {
	if label != "" {
		label += ":"
	}
	t.line("  "+label, value)
}

// flush writes out the last lines, whose columns wait for the end.
func (t *text) flush() {
	_ = t.tw.Flush() // into write's buffer, which does not fail
}
