package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/spf13/pflag"

	"github.com/configmap-attacher/configmap-attacher/plugin/cmd"
)

// FlagTable renders a flag set as a Markdown table (flag, default, description) in the flag
// set's order (VisitAll: sorted by name).
func FlagTable(fs *flag.FlagSet, prefix string) string {
	var b strings.Builder
	fs.VisitAll(func(f *flag.Flag) {
		if b.Len() == 0 {
			b.WriteString("| Flag | Default | Description |\n|------|---------|-------------|\n")
		}
		def := ""
		if f.DefValue != "" {
			def = "`" + f.DefValue + "`"
		}
		fmt.Fprintf(&b, "| `%s%s` | %s | %s |\n", prefix, f.Name, def, mdCell(f.Usage))
	})
	if b.Len() == 0 {
		return "No flags.\n"
	}
	return b.String()
}

// CLIFlagTable renders a command line's flags as a Markdown table (flag, default,
// description), sorted by name: each flag as `--name`, with its short form before it; the
// hidden old names and -h/--help are left out.
func CLIFlagTable(fs *pflag.FlagSet) string {
	var b strings.Builder
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden || f.Name == "help" {
			return
		}
		if b.Len() == 0 {
			b.WriteString("| Flag | Default | Description |\n|------|---------|-------------|\n")
		}
		def := ""
		if f.DefValue != "" {
			def = "`" + f.DefValue + "`"
		}
		name := "`--" + f.Name + "`"
		if f.Shorthand != "" && f.Shorthand != f.Name {
			name = "`-" + f.Shorthand + "`, " + name
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", name, def, mdCell(f.Usage))
	})
	if b.Len() == 0 {
		return "No flags.\n"
	}
	return b.String()
}

// mdCell keeps text inside one table cell.
func mdCell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}

// FlagTables renders every DocCommand's table, by name.
func FlagTables() map[string]string {
	m := map[string]string{}
	for _, c := range cmd.DocCommands() {
		if c.Flags != nil {
			m[c.Name] = CLIFlagTable(c.Flags())
			continue
		}
		m[c.Name] = FlagTable(c.FlagSet(), c.Prefix)
	}
	return m
}

var flagsMarker = regexp.MustCompile(`<!-- flags:([A-Za-z0-9_-]+) -->`)

// ReplaceFlagTables puts tables[NAME] between each <!-- flags:NAME --> and the next
// <!-- /flags:NAME --> in doc. It returns the new text, the names of the blocks whose text
// changed, every name it found, and an error for a marker without its end or an unknown name.
func ReplaceFlagTables(doc string, tables map[string]string) (out string, changed, found []string, err error) {
	var b strings.Builder
	rest := doc
	for {
		loc := flagsMarker.FindStringSubmatchIndex(rest)
		if loc == nil {
			b.WriteString(rest)
			break
		}
		name := rest[loc[2]:loc[3]]
		table, ok := tables[name]
		if !ok {
			return "", nil, nil, fmt.Errorf("<!-- flags:%s -->: no command %q (known: %s)", name, name, strings.Join(sortedKeys(tables), ", "))
		}
		end := "<!-- /flags:" + name + " -->"
		body := rest[loc[1]:]
		i := strings.Index(body, end)
		if j := flagsMarker.FindStringIndex(body); i < 0 || (j != nil && j[0] < i) {
			return "", nil, nil, fmt.Errorf("<!-- flags:%s --> has no %s after it", name, end)
		}
		want := "\n" + table
		if body[:i] != want {
			changed = append(changed, name)
		}
		found = append(found, name)
		b.WriteString(rest[:loc[1]])
		b.WriteString(want)
		b.WriteString(end)
		rest = body[i+len(end):]
	}
	return b.String(), changed, found, nil
}

func sortedKeys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// DocFiles are the documents that may carry flag tables: README.md and docs/*.md under root.
func DocFiles(root string) ([]string, error) {
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	return append([]string{filepath.Join(root, "README.md")}, docs...), nil
}

// UpdateDocs brings every flag table under root up to date; with write false it changes
// nothing. It returns one line per problem: a table that differs from the flag set (naming the
// file and the command), a marker without its end, and, once any document has markers, a
// command whose markers appear nowhere (so a table cannot silently disappear).
func UpdateDocs(root string, write bool) ([]string, error) {
	files, err := DocFiles(root)
	if err != nil {
		return nil, err
	}
	tables := FlagTables()
	var problems []string
	seen := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		out, changed, found, err := ReplaceFlagTables(string(b), tables)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", f, err))
			continue
		}
		for _, n := range found {
			seen[n] = true
		}
		if len(changed) == 0 {
			continue
		}
		if write {
			if err := os.WriteFile(f, []byte(out), 0o644); err != nil {
				return nil, err
			}
			continue
		}
		for _, n := range changed {
			problems = append(problems, fmt.Sprintf("%s: the flag table of %s differs from its flag set: run make docs (go run ./hack/docs)", f, n))
		}
	}
	if len(seen) > 0 {
		for _, c := range cmd.DocCommands() {
			if !seen[c.Name] {
				problems = append(problems, fmt.Sprintf("no document has <!-- flags:%s --> … <!-- /flags:%s -->: put the markers where the %s flags are described, then run make docs (go run ./hack/docs)", c.Name, c.Name, c.Name))
			}
		}
	}
	return problems, nil
}
