package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/configmap-attacher/configmap-attacher/plugin/cmd"
)

// TestDocsFlagTablesUpToDate: the flag tables of README.md and docs/*.md are those of the
// flag sets, and once any document has markers, every command's table is somewhere.
func TestDocsFlagTablesUpToDate(t *testing.T) {
	problems, err := UpdateDocs(filepath.Join("..", ".."), false)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// The command line's table: the short form first, hidden old names and --help left out.
func TestCLIFlagTable(t *testing.T) {
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	fs.StringP("namespace", "n", "", "one | two")
	fs.String("namespaces", "", "old")
	fs.Lookup("namespaces").Hidden = true
	fs.BoolP("help", "h", false, "help")
	want := "| Flag | Default | Description |\n|------|---------|-------------|\n" +
		"| `-n`, `--namespace` |  | one \\| two |\n"
	if got := CLIFlagTable(fs); got != want {
		t.Errorf("CLIFlagTable:\n%s\nwant\n%s", got, want)
	}
}

func TestFlagTable(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.String("b", "", "a | b")
	fs.Bool("a", true, "first")
	want := "| Flag | Default | Description |\n|------|---------|-------------|\n" +
		"| `--a` | `true` | first |\n" +
		"| `--b` |  | a \\| b |\n"
	if got := FlagTable(fs, "--"); got != want {
		t.Errorf("FlagTable:\n%s\nwant\n%s", got, want)
	}
	if got := FlagTable(flag.NewFlagSet("none", flag.ContinueOnError), "-"); got != "No flags.\n" {
		t.Errorf("no flags: %q", got)
	}
}

// The generator on a copy: it fills the blocks, -check then passes, an edited table and a
// missing command's markers are reported by file and command.
func TestUpdateDocs(t *testing.T) {
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "docs"), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(root, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var all strings.Builder
	for _, c := range cmd.DocCommands() {
		all.WriteString("## " + c.Name + "\n\n<!-- flags:" + c.Name + " -->\nstale\n<!-- /flags:" + c.Name + " -->\n\ntext after\n")
	}
	write("README.md", "# no tables here\n")
	write("docs/flags.md", all.String())
	if problems, err := UpdateDocs(root, false); err != nil || len(problems) != len(cmd.DocCommands()) || !strings.Contains(problems[0], "docs/flags.md: the flag table of job differs from its flag set: run make docs (go run ./hack/docs)") {
		t.Fatalf("check of stale tables: %v %q", err, problems)
	}
	if problems, err := UpdateDocs(root, true); err != nil || len(problems) != 0 {
		t.Fatalf("write: %v %q", err, problems)
	}
	if problems, err := UpdateDocs(root, false); err != nil || len(problems) != 0 {
		t.Fatalf("check after write: %v %q", err, problems)
	}
	b, _ := os.ReadFile(filepath.Join(root, "docs/flags.md"))
	if !strings.Contains(string(b), "<!-- flags:job -->\n| Flag | Default | Description |\n") || !strings.Contains(string(b), "| `--rollout` |  | name of the Rollout (required) |\n") ||
		!strings.Contains(string(b), "| `-n`, `--namespace` |  | namespace of the Rollout") || strings.Contains(string(b), "--namespaces") ||
		!strings.Contains(string(b), "| `--version` | `false` | print the version and exit |\n<!-- /flags:job -->\n\ntext after\n") ||
		!strings.Contains(string(b), "| `--qps` | `") || strings.Contains(string(b), "stale") {
		t.Errorf("written:\n%s", b)
	}
	// A hand edit, and a command's markers removed.
	s := strings.Replace(string(b), "name of the Rollout (required)", "name of the Rollout", 1)
	i, j := strings.Index(s, "<!-- flags:controller -->"), strings.Index(s, "<!-- /flags:controller -->")
	s = s[:i] + s[j+len("<!-- /flags:controller -->"):]
	write("docs/flags.md", s)
	problems, err := UpdateDocs(root, false)
	if err != nil || len(problems) != 2 || !strings.Contains(problems[0], "flags.md: the flag table of job differs") ||
		!strings.Contains(problems[1], "no document has <!-- flags:controller -->") {
		t.Errorf("after edits: %v %q", err, problems)
	}
	// A marker without its end.
	write("docs/flags.md", "<!-- flags:job -->\n")
	if problems, _ := UpdateDocs(root, false); len(problems) == 0 || !strings.Contains(problems[0], "has no <!-- /flags:job -->") {
		t.Errorf("unterminated: %q", problems)
	}
}
