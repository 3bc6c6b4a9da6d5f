package kubectl

import (
	"io"
	"strings"
	"text/tabwriter"
)

// text is the one writer of both reports' text form, explain's and
// check's: lines of cells, each cell but the last padded to its column
// (the cells of contiguous lines share columns; a line of one cell, a
// heading, ends them), written into write's buffer.
type text struct {
	tw *tabwriter.Writer
}

func newText(w io.Writer) *text {
	return &text{tw: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)}
}

// line writes one line of cells; no cell, an empty line.
func (t *text) line(cells ...string) {
	_, _ = io.WriteString(t.tw, strings.Join(cells, "\t")+"\n") // into write's buffer, which does not fail
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
