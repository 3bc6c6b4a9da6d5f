package transport

import (
	"context"
	"errors"
	"testing"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/nats-io/nats.go"
)

func TestRoundTrip(t *testing.T) {
	e := cloudevents.NewEvent()
	e.SetID("uid-1/42")
	e.SetType("dev.istio-aux.pod.updated")
	e.SetSource("https://127.0.0.1:6443")
	e.SetSubject("/apis/v1/namespaces/ns/pods/p")
	e.SetExtension("namespace", "ns")
	e.SetExtension("name", "p")
	if err := e.SetData(cloudevents.ApplicationJSON, map[string]string{"a": "b"}); err != nil {
		t.Fatal(err)
	}
	msg := &nats.Msg{Subject: "x", Header: nats.Header{"Nats-Msg-Id": []string{"uid-1/42"}}}
	if err := WriteEvent(context.Background(), &e, msg); err != nil {
		t.Fatal(err)
	}
	for h, want := range map[string]string{
		"ce-id": "uid-1/42", "ce-specversion": "1.0", "ce-type": "dev.istio-aux.pod.updated",
		"ce-subject": "/apis/v1/namespaces/ns/pods/p", "ce-namespace": "ns",
		"content-type": "application/json", "Nats-Msg-Id": "uid-1/42",
	} {
		if got := msg.Header.Get(h); got != want {
			t.Errorf("header %s = %q, want %q", h, got, want)
		}
	}
	if string(msg.Data) != `{"a":"b"}` {
		t.Errorf("body = %s", msg.Data)
	}
	got, err := ReadEvent(context.Background(), msg)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID() != e.ID() || got.Type() != e.Type() || got.Source() != e.Source() ||
		got.Subject() != e.Subject() || got.DataContentType() != "application/json" ||
		string(got.Data()) != string(e.Data()) || got.Extensions()["name"] != "p" {
		t.Errorf("round trip: got %v, want %v", got, e)
	}
	if _, ok := got.Extensions()["nats-msg-id"]; ok {
		t.Error("a NATS header leaked into the extensions")
	}
}

func TestStructured(t *testing.T) {
	msg := &nats.Msg{Header: nats.Header{"content-type": []string{"application/cloudevents+json"}},
		Data: []byte(`{"specversion":"1.0","id":"1","type":"t","source":"s","data":{"x":1}}`)}
	got, err := ReadEvent(context.Background(), msg)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID() != "1" || string(got.Data()) != `{"x":1}` {
		t.Errorf("got %v", got)
	}
}

func TestNotCloudEvent(t *testing.T) {
	for name, msg := range map[string]*nats.Msg{
		"no headers":      {Data: []byte("hello")},
		"unknown version": {Header: nats.Header{"ce-specversion": []string{"9.9"}}},
		"bad structured":  {Header: nats.Header{"content-type": []string{"application/cloudevents+json"}}, Data: []byte("{")},
	} {
		if _, err := ReadEvent(context.Background(), msg); !errors.Is(err, ErrNotCloudEvent) {
			t.Errorf("%s: err = %v, want ErrNotCloudEvent", name, err)
		}
	}
}
