// Command docs writes the flag tables of README.md and docs/*.md from the commands' flag sets
// (plugin/cmd DocCommands): each table goes between <!-- flags:NAME --> and
// <!-- /flags:NAME -->, NAME one of job, audit, controller, install-plugin, step-plugin.
//
//	go run ./hack/docs          # rewrite the tables
//	go run ./hack/docs -check   # exit 1, naming the file and command, if one is out of date
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	check := flag.Bool("check", false, "verify the tables instead of rewriting them; exit 1 if one differs")
	root := flag.String("root", ".", "the repository root (README.md and docs/)")
	flag.Parse()
	problems, err := UpdateDocs(*root, !*check)
	if err != nil {
		fmt.Fprintln(os.Stderr, "docs:", err)
		os.Exit(1)
	}
	for _, p := range problems {
		fmt.Fprintln(os.Stderr, "docs:", p)
	}
	if len(problems) > 0 {
		os.Exit(1)
	}
}
