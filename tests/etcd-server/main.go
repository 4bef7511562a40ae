// Command etcd is etcd's own server, built from its Go module at the version go.mod pins, for
// the tests that run against a current etcd (`make etcd-3.6`, then ETCD_BIN=target/etcd-3.6/etcd
// scripts/with-etcd.sh ...). `go install go.etcd.io/etcd/server/v3@v3.6.x` refuses the module
// (its go.mod replaces its sibling modules with relative paths), so this main module requires
// them at the same version and calls the same entry point as etcd's own main package.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
