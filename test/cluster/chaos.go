package cluster

import "syscall"

// Kill sends SIGKILL (no chance to clean up, as when a node dies or the
// OOM killer strikes) and waits until the process is gone; the chaos tests
// (test/chaos) use it. A process that already ended is left alone.
func (p *Process) Kill() error {
	select {
	case <-p.p.done:
		return nil
	default:
	}
	if err := p.p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	<-p.p.done
	return nil
}
