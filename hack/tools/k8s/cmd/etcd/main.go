// Command etcd is etcd's own server main, built inside the Kubernetes tools
// module so that it shares the exact etcd version kube-apiserver was tested with.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
