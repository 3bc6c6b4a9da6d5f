// Package proxyconfig merges the hold into a pod's proxy.istio.io/config,
// the ProxyConfig YAML Istio's injector reads, without changing anything else
// Istio reads in it. MergeHold is its one entry point.
//
// It reads the user's text twice. As a yaml.Node tree (parse.go), to find
// where one line can go and to prove afterwards that every other node is
// unchanged (insert.go). And as Istio does (istio.go), to know whether Istio
// accepts the config and what it reads as the hold, before and after. Where
// the two readings disagree, or Istio would reject the config, the pod is
// left alone with a message that names the problem.
package proxyconfig

import (
	"errors"
	"fmt"
	"strings"

	yaml "go.yaml.in/yaml/v3"

	"github.com/istio-aux/istio-aux/pkg/keys"
)

// KeyHold is the ProxyConfig field (in the YAML of keys.AnnotationProxyConfig)
// that makes the injector start istio-proxy first and hold the apps until it
// is ready.
const KeyHold = "holdApplicationUntilProxyStarts"

// KeyHoldProto is the proto spelling of KeyHold. Istio reads ProxyConfig
// with protobuf's JSON rules, which accept both; when both are present the
// camelCase one wins, so adding KeyHold would override a user's choice made
// in this spelling.
const KeyHoldProto = "hold_application_until_proxy_starts"

// MergeHold merges "holdApplicationUntilProxyStarts: true" into a ProxyConfig
// YAML document. It reads the document as a yaml.Node tree, where nothing is
// expanded, and refuses anchors, aliases and merge keys before Istio's
// reader (which expands them) sees it; its work is linear in the document,
// which CheckLimits bounds first. It writes by inserting one line (or one
// flow entry) into the user's text, so every other byte, comments and layout
// included, stays as the user wrote it, and keeps the result only when
// Istio reads it as the user's settings plus the hold. changed is false when the user
// already set the hold, in either spelling Istio reads (any value: an
// explicit false is a decision, not an omission). An error means the pod
// must be left alone: the document is over a limit (*LimitError), or it is
// something Istio rejects, reads differently from istio-aux, or istio-aux
// cannot rewrite faithfully; the message names the problem for the user.
func MergeHold(config string) (merged string, changed bool, err error) {
	if config == "" {
		// Most pods: no config at all, which Istio reads as no settings.
		return KeyHold + ": true", true, nil
	}
	if err := CheckLimits(config); err != nil {
		return "", false, err
	}
	root, set, err := readNodes(config)
	if err != nil {
		return "", false, confirmed(config, err)
	}
	// Istio's reading comes after the node checks: it expands aliases,
	// which checkTree has refused by then, and its messages say less.
	js, read, err := istioRead(config)
	switch {
	case err != nil:
		return "", false, istioRejects(err)
	case set:
		return "", false, nil
	case read.GetHoldApplicationUntilProxyStarts() != nil:
		// Istio reads a hold in a key istio-aux does not see as one (a
		// tag such as !!binary turns other text into the key's name):
		// adding ours would overrule the user's.
		return "", false, fmt.Errorf("%s sets %s in a form istio-aux does not read as that key (a YAML tag?); istio-aux left it as it is: write the key plainly",
			keys.AnnotationProxyConfig, KeyHold)
	}
	ok := true
	switch {
	case strings.TrimSpace(config) == "":
		merged = KeyHold + ": true"
	case root == nil:
		// Only comments: keep them and add the key below.
		merged = strings.TrimRight(config, "\n") + "\n" + KeyHold + ": true\n"
	default:
		merged, ok = insertHold(config, root)
	}
	// Never hand Istio a document that does not read back as the user's
	// settings plus ours: better a warning than a silently changed setting.
	if !ok || !readsAsHeld(js, merged) {
		return "", false, fmt.Errorf("%s could not be rewritten without changing it; istio-aux left it as it is: add %s: true yourself",
			keys.AnnotationProxyConfig, KeyHold)
	}
	return merged, true, nil
}

// readNodes reads config as a yaml.Node tree and checks it: its top-level
// mapping root (nil for a blank document or one of comments only), and
// whether the user set the hold there.
func readNodes(config string) (root *yaml.Node, set bool, err error) {
	if strings.TrimSpace(config) == "" {
		return nil, false, nil
	}
	doc, err := parseConfig(config)
	if err != nil || doc == nil {
		return nil, false, err
	}
	root = doc.Content[0]
	if err := checkTree(root); err != nil {
		return nil, false, err
	}
	set, err = userHold(root)
	return root, set, err
}

// rejection is a config Istio rejects, as a reading found it: Istio's own
// (istioRejects), or the node reading, whose claim stands only where
// Istio's reading confirms it (confirmed): the two parsers do not agree on
// every document.
type rejection struct {
	what string // the problem, naming the annotation
	fix  string // what to write instead; "" says nothing
	err  error  // the parser's own error, if any
	// unconfirmed: Istio's reading does not confirm the claim, which
	// becomes "istio-aux does not read it".
	unconfirmed bool
}

func (r *rejection) Error() string {
	claim := "Istio rejects it"
	if r.unconfirmed {
		claim = "istio-aux does not read it"
	}
	s := r.what + "; " + claim
	if r.fix != "" {
		s += ": " + r.fix
	}
	return s
}

func (r *rejection) Unwrap() error { return r.err }

// confirmed returns err, a problem the node reading found in config, as it
// is when what it says of Istio holds, and otherwise without the claim. A
// config that may hold an anchor or an alias is not given to Istio's
// reader, which expands them: its message makes no claim either.
func confirmed(config string, err error) error {
	var r *rejection
	if !errors.As(err, &r) {
		return err
	}
	if !strings.ContainsAny(config, "&*") {
		if _, _, ierr := istioRead(config); ierr != nil {
			return err
		}
	}
	unconfirmed := *r
	unconfirmed.unconfirmed = true
	return &unconfirmed
}
