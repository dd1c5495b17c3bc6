package cmd

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/configmap-attacher/configmap-attacher/plugin/install"
)

// installer runs the install-plugin command with in.
type installer struct{ in *install.Installer }

func (i installer) Main(args []string, stdout, stderr io.Writer) int {
	return (&Install{Stdout: stdout, Stderr: stderr, Installer: i.in}).Main(args)
}

// fakeExe writes content to a file and returns the command with an Installer that installs it.
func fakeExe(t *testing.T, content string) (installer, string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "src-binary")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return installer{&install.Installer{Executable: func() (string, error) { return p, nil }}}, p
}

func TestInstallPlugin(t *testing.T) {
	in, src := fakeExe(t, "binary v2")
	dir := t.TempDir()
	// An older install (as after an initContainer restart, or a controller that copied it
	// already): replaced by a rename, so an open handle keeps reading the old file.
	old := filepath.Join(dir, install.Name)
	if err := os.WriteFile(old, []byte("binary v1"), 0o755); err != nil {
		t.Fatal(err)
	}
	oldFile, err := os.Open(old)
	if err != nil {
		t.Fatal(err)
	}
	defer oldFile.Close()

	var stdout, stderr bytes.Buffer
	if code := in.Main([]string{dir}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	got, err := os.ReadFile(old)
	if err != nil || string(got) != "binary v2" {
		t.Fatalf("installed %q (%v), want %q", got, err, "binary v2")
	}
	fi, err := os.Stat(old)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode() != install.Mode {
		t.Errorf("mode %v, want %v", fi.Mode(), install.Mode)
	}
	var oldContent bytes.Buffer
	if _, err := oldContent.ReadFrom(oldFile); err != nil || oldContent.String() != "binary v1" {
		t.Errorf("the old file's open handle reads %q (%v): it was overwritten in place, not renamed over", oldContent.String(), err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 {
		t.Errorf("dir holds %v (%v), want only %s (no temporary file left)", entries, err, install.Name)
	}
	sum := sha256.Sum256([]byte("binary v2"))
	want := "installed " + old + " from " + src + " (9 bytes, sha256 " + hex.EncodeToString(sum[:]) + ")\n"
	if stdout.String() != want {
		t.Errorf("stdout %q, want %q", stdout.String(), want)
	}
}

func TestInstallPluginErrors(t *testing.T) {
	in, src := fakeExe(t, "x")
	dir := t.TempDir()
	file := filepath.Join(dir, "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, dir string
		in        installer
		want      []string
	}{
		{"missing", filepath.Join(dir, "nope"), in, []string{filepath.Join(dir, "nope"), "does not exist", "mount a volume there"}},
		{"not a directory", file, in, []string{file, "is not a directory"}},
		{"no executable", dir, installer{&install.Installer{Executable: func() (string, error) { return "", errors.New("boom") }}}, []string{"locating this executable: boom"}},
		{"itself", filepath.Dir(src), installer{&install.Installer{Executable: func() (string, error) { return filepath.Join(filepath.Dir(src), install.Name), nil }}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "itself" {
				if err := os.WriteFile(filepath.Join(tc.dir, install.Name), []byte("x"), 0o755); err != nil {
					t.Fatal(err)
				}
				tc.want = []string{"is this executable itself"}
			}
			var stdout, stderr bytes.Buffer
			if code := tc.in.Main([]string{tc.dir}, &stdout, &stderr); code != 1 {
				t.Errorf("exit %d, want 1", code)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr %q lacks %q", stderr.String(), w)
				}
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout %q, want nothing", stdout.String())
			}
		})
	}
}

func TestInstallPluginUsage(t *testing.T) {
	in, _ := fakeExe(t, "x")
	for _, args := range [][]string{nil, {}, {"a", "b"}, {""}, {"-dir", "x"}} {
		var stdout, stderr bytes.Buffer
		if code := in.Main(args, &stdout, &stderr); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
		if !strings.Contains(stderr.String(), "Run configmap-attacher install-plugin --help for usage.") {
			t.Errorf("%q: stderr %q lacks the pointer to -help", args, stderr.String())
		}
	}
	var stdout, stderr bytes.Buffer
	// -help prints the usage on stdout, as every command does; stderr stays empty.
	if code := in.Main([]string{"-h"}, &stdout, &stderr); code != 0 || !strings.HasPrefix(stdout.String(), "usage:") || stderr.Len() != 0 {
		t.Errorf("-h: exit %d stdout %q stderr %q", code, stdout.String(), stderr.String())
	}
}

// TestInstallPluginReadOnly installs into a directory the process cannot write: a read-only bind mount in
// a private mount namespace when running as root (root ignores permission bits), else a 0555
// directory.
func TestInstallPluginReadOnly(t *testing.T) {
	if d := os.Getenv("CMA_INSTALL_RO_DIR"); d != "" {
		in, _ := fakeExe(t, "x")
		var stdout, stderr bytes.Buffer
		code := in.Main([]string{d}, &stdout, &stderr)
		os.Stderr.WriteString(stderr.String())
		os.Exit(code)
	}
	dir := t.TempDir()
	var code int
	var stderr string
	if os.Geteuid() != 0 {
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(dir, 0o755)
		in, _ := fakeExe(t, "x")
		var out, errb bytes.Buffer
		code, stderr = in.Main([]string{dir}, &out, &errb), errb.String()
	} else {
		unshare, err := exec.LookPath("unshare")
		if err != nil {
			t.Skipf("running as root without unshare(1): cannot make a read-only directory (%v)", err)
		}
		cmd := exec.Command(unshare, "-m", "sh", "-ec",
			`mount --bind "$1" "$1"; mount -o remount,bind,ro "$1"; exec "$2" -test.run '^TestInstallPluginReadOnly$'`,
			"sh", dir, os.Args[0])
		cmd.Env = append(os.Environ(), "CMA_INSTALL_RO_DIR="+dir)
		var errb bytes.Buffer
		cmd.Stderr = &errb
		err = cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("unshare: %v\n%s", err, errb.String())
		}
		if strings.Contains(errb.String(), "mount:") {
			t.Skipf("cannot bind-mount read-only here: %s", errb.String())
		}
		code, stderr = ee.ExitCode(), errb.String()
	}
	if code != 1 {
		t.Errorf("exit %d, want 1; stderr %q", code, stderr)
	}
	for _, w := range []string{"cannot write to directory " + dir, "readOnly: false"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("stderr %q lacks %q", stderr, w)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("dir holds %v, want nothing", entries)
	}
}
