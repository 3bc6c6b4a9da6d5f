//go:build linux

package istio

import (
	"fmt"
	"runtime"
	"syscall"
	"unsafe"
)

// netns is a network namespace of its own, with only loopback, held by one
// OS thread: processes started and sockets opened on that thread live in
// it. pilot-agent listens on fixed ports (15000, 15020, 15021, 15090), two
// of them on every interface; in a namespace of their own, as in a pod,
// they neither reach beyond loopback nor collide with another agent.
type netns struct {
	do chan func()
}

// newNetns creates the namespace (needs CAP_SYS_ADMIN) and brings its
// loopback up.
func newNetns() (*netns, error) {
	n := &netns{do: make(chan func())}
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: this thread leaves the host's namespace for good,
		// and Go ends a locked thread when its goroutine returns.
		runtime.LockOSThread()
		if err := syscall.Unshare(syscall.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("unshare: %w", err)
			return
		}
		if err := loopbackUp(); err != nil {
			errc <- err
			return
		}
		errc <- nil
		for f := range n.do {
			f()
		}
	}()
	if err := <-errc; err != nil {
		return nil, fmt.Errorf("network namespace: %w", err)
	}
	return n, nil
}

// run calls f on the namespace's thread and waits for it.
func (n *netns) run(f func()) {
	done := make(chan struct{})
	n.do <- func() { defer close(done); f() }
	<-done
}

// close ends the thread; the namespace goes with its last process.
func (n *netns) close() { close(n.do) }

// loopbackUp sets IFF_UP on lo (SIOCGIFFLAGS, then SIOCSIFFLAGS), which
// `ip link set lo up` does; a new namespace starts with it down.
func loopbackUp() error {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	// struct ifreq: the interface name, then a union whose first member
	// here is the short ifr_flags.
	var req struct {
		name  [syscall.IFNAMSIZ]byte
		flags uint16
		_     [22]byte
	}
	copy(req.name[:], "lo")
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.SIOCGIFFLAGS, uintptr(unsafe.Pointer(&req))); errno != 0 {
		return fmt.Errorf("reading lo's flags: %w", errno)
	}
	req.flags |= syscall.IFF_UP
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.SIOCSIFFLAGS, uintptr(unsafe.Pointer(&req))); errno != 0 {
		return fmt.Errorf("bringing lo up: %w", errno)
	}
	return nil
}
