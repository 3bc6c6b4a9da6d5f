package transport

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"
)

// TestDialerOutlivesTheDNS: a name the cluster DNS stops answering for (a
// CoreDNS pod on a node that died) is dialled at the addresses it had last;
// one it never answered for fails; an address that answers nothing is
// given up on within DialTimeout and the next one is tried.
func TestDialerOutlivesTheDNS(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	dnsUp := true
	d := NewDialer()
	d.lookup = func(ctx context.Context, host string) ([]string, error) {
		if host != "proxy-quit.istio-aux.svc.cluster.local" {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		if !dnsUp {
			<-ctx.Done() // the query went to a dead server: no answer
			return nil, ctx.Err()
		}
		// An address nothing answers on (TEST-NET-1) first, then the live one.
		return []string{"192.0.2.1", "127.0.0.1"}, nil
	}
	ctx := context.Background()
	start := time.Now()
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort("proxy-quit.istio-aux.svc.cluster.local", port))
	if err != nil {
		t.Fatalf("with the DNS up: %v", err)
	}
	conn.Close()
	if took := time.Since(start); took > DialTimeout+time.Second {
		t.Errorf("the dead address held the dial for %v, want at most %v", took, DialTimeout)
	}

	dnsUp = false
	start = time.Now()
	conn, err = d.DialContext(ctx, "tcp", net.JoinHostPort("proxy-quit.istio-aux.svc.cluster.local", port))
	if err != nil {
		t.Fatalf("with the DNS down, the name's last addresses: %v", err)
	}
	conn.Close()
	if took := time.Since(start); took > LookupTimeout+DialTimeout+time.Second {
		t.Errorf("took %v with the DNS down", took)
	}
	_, err = d.DialContext(ctx, "tcp", net.JoinHostPort("never-resolved.example", port))
	var dnsErr *net.DNSError
	if !errors.As(err, &dnsErr) {
		t.Errorf("a name never resolved: %v, want its lookup's error", err)
	}
}

// TestServiceRetriesTryAgainOnlyWhatTimedOut: behind a Service's cluster
// IP a connection that found no one (a pod on a dead node) is tried
// again, up to three times; a refused one is not (it would be refused
// again).
func TestServiceRetriesTryAgainOnlyWhatTimedOut(t *testing.T) {
	for name, tc := range map[string]struct {
		errs      []error // one per attempt; nil connects
		wantCalls int
		wantErr   bool
	}{
		"two dead picks, then a live one": {errs: []error{timeout{}, timeout{}, nil}, wantCalls: 3},
		"three dead picks":                {errs: []error{timeout{}, timeout{}, timeout{}}, wantCalls: 3, wantErr: true},
		"refused":                         {errs: []error{errors.New("connect: connection refused")}, wantCalls: 1, wantErr: true},
	} {
		t.Run(name, func(t *testing.T) {
			d := NewDialer().WithServiceRetries()
			calls := 0
			d.dial = func(context.Context, string, string) (net.Conn, error) {
				err := tc.errs[calls]
				calls++
				if err != nil {
					return nil, err
				}
				c, _ := net.Pipe()
				return c, nil
			}
			conn, err := d.DialContext(context.Background(), "tcp", "10.96.12.34:80")
			if conn != nil {
				conn.Close()
			}
			if calls != tc.wantCalls || (err != nil) != tc.wantErr {
				t.Errorf("%d attempts, err %v; want %d attempts, an error %t", calls, err, tc.wantCalls, tc.wantErr)
			}
		})
	}
}

// timeout is a dial that found no one.
type timeout struct{}

func (timeout) Error() string   { return "i/o timeout" }
func (timeout) Timeout() bool   { return true }
func (timeout) Temporary() bool { return true }
