package main

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"
)

// TestCapturePassesThrough: a connection the capture rules redirected to
// a virtual listener reaches its original destination, both ways and to
// the end of each direction; inbound ones come from 127.0.0.6, as Envoy's
// passthrough binds, outbound ones from the usual address; one whose
// original destination is a virtual listener itself is closed, not looped.
func TestCapturePassesThrough(t *testing.T) {
	// The backend tells the caller where the connection came from, echoes
	// one line, then reads to the end.
	backend, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Close()
	go func() {
		for {
			c, err := backend.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				from := c.RemoteAddr().(*net.TCPAddr).IP.String()
				line, _ := bufio.NewReader(c).ReadString('\n')
				_, _ = io.WriteString(c, from+" "+line)
			}()
		}
	}()
	target := netip.MustParseAddrPort(backend.Addr().String())
	self := netip.AddrPortFrom(target.Addr(), outboundPort)

	cases := map[string]struct {
		port     int
		dst      netip.AddrPort
		wantFrom string // "" = the connection is closed without an answer
	}{
		"outbound":         {outboundPort, target, "127.0.0.1"},
		"inbound":          {inboundPort, target, "127.0.0.6"},
		"to the listener":  {outboundPort, self, ""},
		"inbound, to self": {inboundPort, netip.AddrPortFrom(target.Addr(), inboundPort), ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := captureListeners(func(*net.TCPConn) (netip.AddrPort, error) { return tc.dst, nil })[tc.port]
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			go func() { _ = c.serve(l) }()
			conn, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.WriteString(conn, "hello\n"); err != nil {
				t.Fatal(err)
			}
			_ = conn.(*net.TCPConn).CloseWrite()
			got, err := io.ReadAll(conn)
			if err != nil && (tc.wantFrom != "" || !errors.Is(err, syscall.ECONNRESET)) {
				t.Fatal(err) // closing with the request unread resets: no answer either
			}
			want := ""
			if tc.wantFrom != "" {
				want = tc.wantFrom + " hello\n"
			}
			if string(got) != want {
				t.Errorf("answer %q, want %q", got, want)
			}
		})
	}
}

// TestInterceptionMode: the stand-in captures for REDIRECT (also when the
// bootstrap names none, istiod's default), serves nothing for NONE and
// refuses TPROXY, which it cannot pass through.
func TestInterceptionMode(t *testing.T) {
	for mode, wantErr := range map[string]bool{"NONE": false, "REDIRECT": false, "TPROXY": true} {
		p := newProxy(time.Hour, nil) // never ready: nothing listens
		stop, err := p.captureTraffic(mode, nil, make(chan error, 2))
		if (err != nil) != wantErr {
			t.Errorf("%s: error %v, want error %t", mode, err, wantErr)
		}
		if stop != nil {
			stop()
		}
	}
	var b bootstrap
	if got := b.interceptionMode(); got != "REDIRECT" {
		t.Errorf("no mode in the bootstrap: %s, want REDIRECT", got)
	}
}
