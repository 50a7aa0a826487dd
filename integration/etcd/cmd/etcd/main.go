// Command etcd is the etcd server, built from the Go module proxy at the version go.mod
// pins: the server's own entry point, nothing added.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
