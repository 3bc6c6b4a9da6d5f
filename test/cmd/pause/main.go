// Command pause is the sandbox ("pause") image of the real node in
// test/realnode: it holds a pod's namespaces, as registry.k8s.io/pause does,
// which cannot be pulled here. It sleeps until SIGTERM or SIGINT and reaps
// orphans (it is PID 1 of pods that share their process namespace).
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			return
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
