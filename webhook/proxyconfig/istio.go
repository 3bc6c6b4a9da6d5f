package proxyconfig

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/golang/protobuf/jsonpb" //nolint:staticcheck // what Istio reads ProxyConfig with
	meshconfig "istio.io/api/mesh/v1alpha1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/istio-aux/istio-aux/pkg/keys"
)

// istioRead reads config as istiod's injector does (pkg/config/mesh
// MergeProxyConfig → pkg/util/protomarshal ApplyYAML, istio.io/istio at the
// version hack/tools/istio pins): sigs.k8s.io/yaml converts the YAML (1.1)
// to JSON, js, and golang/protobuf's jsonpb reads that into a ProxyConfig,
// first refusing unknown fields and, when that fails, again on the same
// message allowing them. Istio reads onto its mesh defaults; whether it
// accepts the config, and what it reads as the hold, do not depend on them.
// An error is Istio rejecting the config: the injection, and so the pod,
// fails. hack/tools/istio's FuzzAgreesWithIstio holds this to Istio's code.
func istioRead(config string) (js []byte, pc *meshconfig.ProxyConfig, err error) {
	js, err = sigsyaml.YAMLToJSON([]byte(config))
	if err != nil {
		return nil, nil, err
	}
	pc = &meshconfig.ProxyConfig{}
	if err := (&jsonpb.Unmarshaler{}).Unmarshal(bytes.NewReader(js), pc); err != nil {
		lenient := jsonpb.Unmarshaler{AllowUnknownFields: true}
		if err := lenient.Unmarshal(bytes.NewReader(js), pc); err != nil {
			return nil, nil, err
		}
	}
	return js, pc, nil
}

// readsAsHeld reports whether Istio reads merged as it read the user's
// config, whose JSON is js, plus holdApplicationUntilProxyStarts: true: the
// JSON sigs.k8s.io/yaml makes of merged is js's object, member for member,
// with that one member added. jsonpb reads an object member by member, and
// js has neither spelling of the hold, so it then reads the ProxyConfig it
// read from js with the hold set.
func readsAsHeld(js []byte, merged string) bool {
	back, err := sigsyaml.YAMLToJSON([]byte(merged))
	if err != nil {
		return false
	}
	var before, after map[string]json.RawMessage
	if json.Unmarshal(js, &before) != nil || json.Unmarshal(back, &after) != nil {
		return false
	}
	_, camel := before[KeyHold]
	_, snake := before[KeyHoldProto]
	if camel || snake || len(after) != len(before)+1 || string(after[KeyHold]) != "true" {
		return false
	}
	for k, v := range before {
		if w, ok := after[k]; !ok || !bytes.Equal(v, w) {
			return false
		}
	}
	return true
}

// istioRejects is the error for a config Istio's own reading refused.
func istioRejects(err error) error {
	return &rejection{what: fmt.Sprintf("%s is not a ProxyConfig Istio reads (%s)", keys.AnnotationProxyConfig, clipTo(err.Error(), 160)), err: err}
}

// IstioHold is the hold as Istio reads config: set when config names it in
// either spelling Istio reads, and its value. An error means config is over
// istio-aux's limits or Istio rejects it. kubectl istio-aux explain reads a
// pod's annotation with it, to tell a user's explicit false from a true that
// Istio did not apply.
func IstioHold(config string) (hold, set bool, err error) {
	if config == "" {
		return false, false, nil
	}
	if err := CheckLimits(config); err != nil {
		return false, false, err
	}
	_, pc, err := istioRead(config)
	if err != nil {
		return false, false, istioRejects(err)
	}
	if v := pc.GetHoldApplicationUntilProxyStarts(); v != nil {
		return v.GetValue(), true, nil
	}
	return false, false, nil
}
