package proxyconfig

import (
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// insertHold adds the hold to the text of config, whose top-level mapping is
// root: a last line at root's indentation for a block mapping, a last entry
// for a flow mapping. The caller checks how Istio reads the result.
func insertHold(config string, root *yaml.Node) (string, bool) {
	if root.Style&yaml.FlowStyle == 0 {
		line := strings.Repeat(" ", root.Column-1) + KeyHold + ": true\n"
		switch {
		case strings.HasSuffix(config, "\n") || strings.HasSuffix(config, "\r"):
			return config + line, true
		case !endsInBlockScalar(root):
			return config + "\n" + line, true
		}
		// A block scalar (| or >) that ends the text would take in the line
		// break before a last line: the hold goes first instead.
		at := lineOffset(config, root.Line)
		if at < 0 {
			return "", false
		}
		return config[:at] + line + config[at:], true
	}
	// A JSON document stays JSON.
	entry := `"` + KeyHold + `": true`
	if len(root.Content) > 0 && root.Content[0].Style&yaml.DoubleQuotedStyle == 0 {
		entry = KeyHold + ": true"
	}
	end := closingBrace(config)
	if end < 0 {
		return "", false
	}
	// Right after the last entry, and before the comment that may end its
	// line when the brace is on a line of its own.
	at := len(strings.TrimRight(config[:end], " \t\r\n"))
	if strings.ContainsAny(config[at:end], "\n\r") {
		lineStart := strings.LastIndexAny(config[:at], "\n\r") + 1
		if c := commentStart(config[lineStart:at]); c >= 0 {
			at = len(strings.TrimRight(config[:lineStart+c], " \t"))
		}
	}
	if at == 0 {
		return "", false
	}
	switch config[at-1] {
	case '{':
	case ',':
		entry = " " + entry
	default:
		entry = ", " + entry
	}
	return config[:at] + entry + config[at:], true
}

// endsInBlockScalar reports whether the last node of the tree is a literal
// or folded block scalar.
func endsInBlockScalar(n *yaml.Node) bool {
	for (n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode) && len(n.Content) > 0 {
		n = n.Content[len(n.Content)-1]
	}
	return n.Kind == yaml.ScalarNode && n.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0
}

// lineOffset is the index in s where its line n (from 1) starts, counting
// "\n" breaks, or -1.
func lineOffset(s string, n int) int {
	at := 0
	for ; n > 1; n-- {
		i := strings.IndexByte(s[at:], '\n')
		if i < 0 {
			return -1
		}
		at += i + 1
	}
	return at
}

// closingBrace returns the index of the '}' that closes a document's flow
// mapping, or -1: on the last line that holds more than a comment, the first
// '}' followed by nothing but blanks and a comment. A "}" or " #" inside a
// quoted string on that line can mislead it; the caller's check then refuses
// the result.
func closingBrace(config string) int {
	for end := len(config); end > 0; {
		lineStart := strings.LastIndexAny(config[:end], "\n\r") + 1
		line := config[lineStart:end]
		if t := strings.TrimLeft(line, " \t"); t == "" || t[0] == '#' {
			end = max(lineStart-1, 0)
			continue
		}
		for i := range len(line) {
			if line[i] != '}' {
				continue
			}
			rest := line[i+1:]
			if t := strings.TrimLeft(rest, " \t"); t == "" || (t[0] == '#' && len(t) < len(rest)) {
				return lineStart + i
			}
		}
		return -1
	}
	return -1
}

func isPlain(n *yaml.Node) bool {
	return n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) == 0
}

// commentStart is the index of the first '#' in line that starts a comment
// (at the start or after a blank), or -1.
func commentStart(line string) int {
	for i := range len(line) {
		if line[i] == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t') {
			return i
		}
	}
	return -1
}
