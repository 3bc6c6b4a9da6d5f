package transport

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// How the bridge's connections (to NATS, to the function) get through the
// loss of a node. A node that dies, or is cut off, sends nothing: no reset,
// no close. Left to the kernel, a connection to it would hang for as long as
// TCP retransmits (about 15 minutes), and a dial would wait for its full
// timeout. And the cluster DNS loses its share of the queries that go to a
// CoreDNS pod on that node until the node is marked unreachable (about 50 s):
// a name looked up then, with a search path and A and AAAA queries, most
// likely fails. A delivery stuck on a dead function pod, a NATS client
// writing into a dead server, or a name that does not resolve would stop
// quits for that long.
const (
	// DialTimeout bounds a connection attempt to one address: an address
	// of a node that is gone answers nothing, and the next is worth trying.
	DialTimeout = 2 * time.Second
	// LookupTimeout bounds a name's lookup; past it, the addresses the name
	// had last are used.
	LookupTimeout = 4 * time.Second
	// UnackedTimeout closes a connection whose sent data the peer has not
	// acknowledged for this long (TCP_USER_TIMEOUT): its host is gone. A
	// live peer's kernel acknowledges at once, however busy its process is,
	// so a slow answer (a quit waiting on its exec) never trips it.
	UnackedTimeout = 5 * time.Second
	// keepAlive probes an idle connection this often, so that one whose
	// peer went while nothing was sent is closed too (within
	// UnackedTimeout of the first unanswered probe).
	keepAlive = 5 * time.Second
)

// Dialer dials the bridge's connections: each address within DialTimeout,
// with keep-alives and UnackedTimeout; a name is looked up within
// LookupTimeout, and if it cannot be, dialled at the addresses it had last.
// Its zero value is not usable: NewDialer.
type Dialer struct {
	net    net.Dialer
	dial   func(ctx context.Context, network, addr string) (net.Conn, error) // net's, but in tests
	lookup func(ctx context.Context, host string) ([]string, error)
	// attempts is how many times an address that did not answer is tried
	// (WithServiceRetries).
	attempts int
	mu       sync.Mutex
	last     map[string][]string
}

// NewDialer returns a Dialer on the system's resolver.
func NewDialer() *Dialer {
	d := &Dialer{
		attempts: 1,
		net: net.Dialer{
			Timeout:   DialTimeout,
			KeepAlive: keepAlive,
			Control:   userTimeout,
		},
		lookup: net.DefaultResolver.LookupHost,
		last:   map[string][]string{},
	}
	d.dial = d.net.DialContext
	return d
}

// WithServiceRetries makes d try an address that did not answer twice
// more: for a Service's cluster IP, behind which kube-proxy picks a pod at
// random for each connection, and keeps picking one on a node that died
// until its endpoint goes (about 50 s). Three tries all landing there are
// one chance in eight with two pods; a delivery that failed instead waits
// out its back-off.
func (d *Dialer) WithServiceRetries() *Dialer {
	d.attempts = 3
	return d
}

// userTimeout sets TCP_USER_TIMEOUT on a TCP socket.
func userTimeout(network, _ string, c syscall.RawConn) error {
	if !strings.HasPrefix(network, "tcp") {
		return nil
	}
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(UnackedTimeout.Milliseconds()))
	})
	if err != nil {
		return err
	}
	return serr
}

// Dial is DialContext without a context, as nats.go's custom dialer has it.
func (d *Dialer) Dial(network, addr string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, addr)
}

// DialContext connects to addr, trying each address of its host in turn.
func (d *Dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return d.dial(ctx, network, addr)
	}
	ips := []string{host}
	if net.ParseIP(host) == nil {
		if ips, err = d.resolve(ctx, host); err != nil {
			return nil, err
		}
	}
	var errs []error
	for _, ip := range ips {
		for range d.attempts {
			conn, err := d.dial(ctx, network, net.JoinHostPort(ip, port))
			if err == nil {
				return conn, nil
			}
			errs = append(errs, err)
			var ne net.Error
			if ctx.Err() != nil || !errors.As(err, &ne) || !ne.Timeout() {
				break // refused, unreachable: trying again changes nothing
			}
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// resolve looks host up, remembering its addresses; when the lookup fails,
// the ones it had last stand in (a Service's cluster IP does not change).
func (d *Dialer) resolve(ctx context.Context, host string) ([]string, error) {
	lctx, cancel := context.WithTimeout(ctx, LookupTimeout)
	ips, err := d.lookup(lctx, host)
	cancel()
	d.mu.Lock()
	defer d.mu.Unlock()
	if err == nil && len(ips) > 0 {
		d.last[host] = ips
		return ips, nil
	}
	if last := d.last[host]; len(last) > 0 {
		return last, nil
	}
	return nil, err
}
