package install

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The command's behaviour (messages, exit codes, a read-only directory) is tested with
// cmd.Install in plugin/cmd; this is the core's result.
func TestInstallResult(t *testing.T) {
	src := filepath.Join(t.TempDir(), "src-binary")
	if err := os.WriteFile(src, []byte("binary v2"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	r, err := (&Installer{Executable: func() (string, error) { return src, nil }}).Install(dir)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("binary v2"))
	if want := (Result{Path: filepath.Join(dir, Name), Source: src, Size: 9, SHA256: hex.EncodeToString(sum[:])}); r != want {
		t.Errorf("Install = %+v, want %+v", r, want)
	}
	if fi, err := os.Stat(r.Path); err != nil || fi.Mode() != Mode {
		t.Errorf("installed file %v (%v), want mode %v", fi, err, Mode)
	}
	if _, err := (&Installer{Executable: func() (string, error) { return src, nil }}).Install(filepath.Join(dir, "nope")); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing directory: %v", err)
	}
}

// TestInstallPrefersTheStepPlugin: with configmap-attacher-step beside the executable (the
// image), that is what is installed, as configmap-attacher; a StepName file that is not
// executable, or a directory of that name, is not a step plugin, and the executable is.
func TestInstallPrefersTheStepPlugin(t *testing.T) {
	for _, tc := range []struct {
		name     string
		plant    func(t *testing.T, path string)
		wantStep bool
	}{
		{"executable", func(t *testing.T, p string) { write(t, p, "step alone", 0o755) }, true},
		{"not-executable", func(t *testing.T, p string) { write(t, p, "step alone", 0o644) }, false},
		{"directory", func(t *testing.T, p string) {
			if err := os.Mkdir(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"absent", func(*testing.T, string) {}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin := t.TempDir()
			exe := filepath.Join(bin, "configmap-attacher")
			write(t, exe, "full binary", 0o755)
			tc.plant(t, filepath.Join(bin, StepName))
			dir := t.TempDir()
			r, err := (&Installer{Executable: func() (string, error) { return exe, nil }}).Install(dir)
			if err != nil {
				t.Fatal(err)
			}
			want, wantSrc := "full binary", exe
			if tc.wantStep {
				want, wantSrc = "step alone", filepath.Join(bin, StepName)
			}
			got, err := os.ReadFile(filepath.Join(dir, Name))
			if err != nil || string(got) != want || r.Source != wantSrc {
				t.Errorf("installed %q from %s (%v), want %q from %s", got, r.Source, err, want, wantSrc)
			}
		})
	}
}

func write(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}
