// Command etcdctl is etcd's client, built from the Go module proxy (the module's own
// main.go, which `go install` refuses to build because etcdctl's go.mod has replace
// directives).
package main

import "go.etcd.io/etcd/etcdctl/v3/ctlv3"

func main() { ctlv3.MustStart() }
