package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/configmap-attacher/configmap-attacher/hack/release/stamp"
)

// checkVersion is `check-version [-root DIR] [-want vX.Y.Z]`: every mention of the release
// version in the tree agrees with hack/release/VERSION, and (with -want, the workflow's tag)
// VERSION is that version and docs/changelog.md has its section.
func checkVersion(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("check-version", flag.ContinueOnError)
	root := fs.String("root", ".", "repository root")
	want := fs.String("want", "", "the version being released (the tag): VERSION must be it and docs/changelog.md must have its section")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	v, err := stamp.Read(*root)
	if err != nil {
		return err
	}
	if *want != "" {
		if err := stamp.Validate(*want); err != nil {
			return fmt.Errorf("-want: %w", err)
		}
		if *want != v {
			return fmt.Errorf("%s says %s but the release is %s: run make set-version VERSION=%s, commit, and tag that commit", stamp.File, v, *want, *want)
		}
		md, err := readFile(*root, "docs/changelog.md")
		if err != nil {
			return err
		}
		if _, unreleased, err := stamp.ChangelogSection(md, v); err != nil || unreleased {
			return fmt.Errorf("docs/changelog.md has no section \"## %s\": rename \"## Unreleased\" to it before tagging (%v)", v, err)
		}
	}
	bad, err := stamp.Mismatches(*root, v)
	if err != nil {
		return err
	}
	if len(bad) > 0 {
		var b strings.Builder
		for _, m := range bad {
			fmt.Fprintf(&b, "\n  %s", m)
		}
		return fmt.Errorf("%d mention(s) of the release version differ from %s (%s); run make set-version VERSION=%s:%s", len(bad), stamp.File, v, v, b.String())
	}
	all, err := stamp.Scan(*root, v)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: %s, and all %d mentions agree\n", stamp.File, v, len(all))
	return nil
}

// setVersion is `set-version [-root DIR] vX.Y.Z`.
func setVersion(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("set-version", flag.ContinueOnError)
	root := fs.String("root", ".", "repository root")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("set-version: want one argument, the version (e.g. v0.2.0); got %q", fs.Args())
	}
	changed, err := stamp.Set(*root, fs.Arg(0))
	if err != nil {
		return err
	}
	for _, f := range changed {
		fmt.Fprintln(stdout, "stamped", f)
	}
	return nil
}

func readFile(root, rel string) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", rel, err)
	}
	return b, nil
}
