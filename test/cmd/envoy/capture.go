package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Where traffic is captured to and what the stand-in does with it. With
// Istio's traffic capture on (interception mode REDIRECT: the rules the
// istio-cni plugin or istio-init write in the pod's network namespace),
// every TCP connection the app opens is redirected to 15001 and every one
// that arrives at the pod is redirected to 15006; the proxy's own
// connections (its UID and GID) are not. istiod gives Envoy two listeners
// there, virtualOutbound and virtualInbound, which find the connection's
// original destination (SO_ORIGINAL_DST) and pass it through when no route
// says otherwise. The stand-in does the passing through, in bytes: enough
// for a workload's traffic to go through its proxy as it would in a real
// mesh, so that traffic before the proxy is ready is refused, as it is.
const (
	// outboundPort is virtualOutbound's (MeshConfig proxyListenPort).
	outboundPort = 15001
	// inboundPort is virtualInbound's (proxyInboundListenPort).
	inboundPort = 15006
)

// inboundBind is the source address Envoy's inbound passthrough binds
// (InboundPassthroughBindIpv4): the capture rules let a connection from it
// out of the loopback interface, where any other connection of the proxy's
// to the pod's own address would be redirected to 15006 again.
var inboundBind = netip.MustParseAddr("127.0.0.6")

// soOriginalDst is netfilter's SO_ORIGINAL_DST (linux/netfilter_ipv4.h).
const soOriginalDst = 80

// originalDst is where a redirected connection was going.
type originalDst func(*net.TCPConn) (netip.AddrPort, error)

// kernelOriginalDst asks netfilter for a redirected IPv4 connection's
// original destination: a struct sockaddr_in, read through the 16-byte
// getsockopt wrapper x/sys offers (its first two bytes are the family).
func kernelOriginalDst(c *net.TCPConn) (netip.AddrPort, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var sa *unix.IPv6Mreq
	var serr error
	if err := raw.Control(func(fd uintptr) {
		sa, serr = unix.GetsockoptIPv6Mreq(int(fd), syscall.SOL_IP, soOriginalDst)
	}); err != nil {
		return netip.AddrPort{}, err
	}
	if serr != nil {
		return netip.AddrPort{}, fmt.Errorf("SO_ORIGINAL_DST: %w", serr)
	}
	port := binary.BigEndian.Uint16(sa.Multiaddr[2:4])
	addr := netip.AddrFrom4([4]byte(sa.Multiaddr[4:8]))
	return netip.AddrPortFrom(addr, port), nil
}

// capture is one virtual listener: it accepts redirected connections and
// splices each to its original destination, dialled from bind if it is
// valid (inbound) or from any address (outbound).
type capture struct {
	name string
	dst  originalDst
	bind netip.Addr
	// self are the ports no connection may be passed to: a connection made
	// to the listener itself, not redirected, would loop.
	self map[uint16]bool
}

// serve accepts on l until it is closed.
func (c *capture) serve(l net.Listener) error {
	for {
		conn, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		go c.pass(conn.(*net.TCPConn))
	}
}

// pass splices one connection to its original destination; a destination
// that cannot be told or reached closes it, as Envoy resets it.
func (c *capture) pass(in *net.TCPConn) {
	defer in.Close()
	dst, err := c.dst(in)
	if err == nil && c.self[dst.Port()] {
		err = fmt.Errorf("original destination %s is the listener itself", dst)
	}
	if err != nil {
		log.Printf("%s: %s: %v", c.name, in.RemoteAddr(), err)
		return
	}
	d := net.Dialer{Timeout: 5 * time.Second}
	if c.bind.IsValid() {
		d.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(c.bind, 0))
	}
	out, err := d.DialContext(context.Background(), "tcp", dst.String())
	if err != nil {
		log.Printf("%s: %s → %s: %v", c.name, in.RemoteAddr(), dst, err)
		return
	}
	defer out.Close()
	splice(in, out.(*net.TCPConn))
}

// splice copies both ways until both directions end, passing each half
// close on.
func splice(a, b *net.TCPConn) {
	var wg sync.WaitGroup
	one := func(dst, src *net.TCPConn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		_ = dst.CloseWrite()
	}
	wg.Add(2)
	go one(a, b)
	go one(b, a)
	wg.Wait()
}

// captureListeners are the two virtual listeners of interception mode
// REDIRECT, on every address, as istiod configures them.
func captureListeners(dst originalDst) map[int]*capture {
	self := map[uint16]bool{outboundPort: true, inboundPort: true}
	return map[int]*capture{
		outboundPort: {name: "virtualOutbound", dst: dst, self: self},
		inboundPort:  {name: "virtualInbound", dst: dst, bind: inboundBind, self: self},
	}
}
