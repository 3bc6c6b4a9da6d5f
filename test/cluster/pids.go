package cluster

// Process ids, for what reads a process's resources from /proc (the
// benchmarks' memory and CPU figures).

// Pid is the process id of a process started by StartProcess.
func (p *Process) Pid() int { return p.p.cmd.Process.Pid }

// Pids maps the name of every process the cluster runs ("etcd",
// "kube-apiserver", "kube-controller-manager", "kwok", and what a Node
// started with StartProcess: "kubelet", "containerd") to its process id.
func (c *Cluster) Pids() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.procs))
	for _, p := range c.procs {
		out[p.name] = p.cmd.Process.Pid
	}
	return out
}
