// Command etcdutl is etcd's offline administration tool, built from the Go module proxy.
// Its root command is copied from etcdutl's own main package (ctl.go, Apache-2.0, the etcd
// authors), which cannot be imported: `go install` refuses it because etcdutl's go.mod has
// replace directives.
package main

import (
	"github.com/spf13/cobra"

	"go.etcd.io/etcd/etcdutl/v3/etcdutl"
	"go.etcd.io/etcd/pkg/v3/cobrautl"
)

func main() {
	cobra.EnablePrefixMatching = true
	root := &cobra.Command{
		Use:        "etcdutl",
		Short:      "An administrative command line tool for etcd3.",
		SuggestFor: []string{"etcdutl"},
	}
	root.PersistentFlags().StringVarP(&etcdutl.OutputFormat, "write-out", "w", "simple",
		"set the output format (fields, json, protobuf, simple, table)")
	root.AddCommand(
		etcdutl.NewDefragCommand(),
		etcdutl.NewSnapshotCommand(),
		etcdutl.NewHashKVCommand(),
		etcdutl.NewVersionCommand(),
		etcdutl.NewCompletionCommand(),
		etcdutl.NewMigrateCommand(),
	)
	root.SetHelpTemplate(`{{.UsageString}}`)
	if err := root.Execute(); err != nil {
		cobrautl.ExitWithError(cobrautl.ExitError, err)
	}
}
