package slim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// Bounds on a slim pod decoded from JSON, which may come from anyone who can
// reach the proxy-quit function. Past them, decoding fails (the event is
// invalid) instead of allocating in proportion to a hostile input: a 1 MiB
// body of empty containers would otherwise become hundreds of MiB of
// structs. The rule bounds are the API server's own validation limits, so
// no real pod exceeds them; no real pod comes near MaxContainers either.
const (
	// MaxContainers bounds each of containers, initContainers and their
	// status lists.
	MaxContainers = 256
	// MaxRules bounds restartPolicyRules per container.
	MaxRules = 20
	// MaxExitCodes bounds the exit codes of one rule.
	MaxExitCodes = 255
	// MaxSidecars bounds the names read from a pod's sidecars annotation;
	// further names are ignored, so their containers count as apps and the
	// proxy waits for them: never an early quit.
	MaxSidecars = 64
)

// ErrBeyondBounds marks a list longer than its bound.
var ErrBeyondBounds = errors.New("beyond istio-aux's bounds")

// WithinBounds is nil when JSON decoding accepts p's lists. A pod the API
// server holds is bounded only by its size: a valid pod can have more
// containers than MaxContainers, and its event must then not carry them
// (podevent.New).
func WithinBounds(p *Pod) error {
	for _, l := range []struct {
		n, limit int
		what     string
	}{
		{len(p.Spec.Containers), MaxContainers, "containers"},
		{len(p.Spec.InitContainers), MaxContainers, "init containers"},
		{len(p.Status.ContainerStatuses), MaxContainers, "container statuses"},
		{len(p.Status.InitContainerStatuses), MaxContainers, "init container statuses"},
	} {
		if l.n > l.limit {
			return fmt.Errorf("%w: %d %s, more than %d", ErrBeyondBounds, l.n, l.what, l.limit)
		}
	}
	for _, c := range append(slices.Clip(p.Spec.Containers), p.Spec.InitContainers...) {
		if len(c.RestartPolicyRules) > MaxRules {
			return fmt.Errorf("%w: container %s has %d restart rules, more than %d", ErrBeyondBounds, c.Name, len(c.RestartPolicyRules), MaxRules)
		}
		for _, r := range c.RestartPolicyRules {
			if r.ExitCodes != nil && len(r.ExitCodes.Values) > MaxExitCodes {
				return fmt.Errorf("%w: container %s has a rule of %d exit codes, more than %d", ErrBeyondBounds, c.Name, len(r.ExitCodes.Values), MaxExitCodes)
			}
		}
	}
	return nil
}

// UnmarshalJSON decodes at most MaxContainers containers.
func (c *Containers) UnmarshalJSON(data []byte) error {
	return decodeList(data, MaxContainers, "containers", (*[]Container)(c))
}

// UnmarshalJSON decodes at most MaxContainers statuses.
func (s *Statuses) UnmarshalJSON(data []byte) error {
	return decodeList(data, MaxContainers, "container statuses", (*[]ContainerStatus)(s))
}

// UnmarshalJSON decodes at most MaxRules rules.
func (rs *Rules) UnmarshalJSON(data []byte) error {
	return decodeList(data, MaxRules, "restart rules", (*[]Rule)(rs))
}

// UnmarshalJSON decodes at most MaxExitCodes exit codes.
func (c *Codes) UnmarshalJSON(data []byte) error {
	return decodeList(data, MaxExitCodes, "exit codes", (*[]int32)(c))
}

// decodeList decodes a JSON array element by element, failing as soon as it
// holds more than limit elements.
func decodeList[T any](data []byte, limit int, what string, out *[]T) error {
	*out = nil
	if isNull(data) {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := expectDelim(dec, '['); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	var list []T
	for dec.More() {
		if len(list) == limit {
			return fmt.Errorf("%w: more than %d %s", ErrBeyondBounds, limit, what)
		}
		var v T
		if err := dec.Decode(&v); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		list = append(list, v)
	}
	*out = list
	return nil
}

func isNull(data []byte) bool { return bytes.Equal(bytes.TrimSpace(data), []byte("null")) }

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return fmt.Errorf("want %q, got %v", want, tok)
	}
	return nil
}

func stringToken(dec *json.Decoder) (string, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", err
	}
	s, ok := tok.(string)
	if !ok {
		return "", fmt.Errorf("want a string, got %v", tok)
	}
	return s, nil
}
