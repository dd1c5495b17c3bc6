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
	if want := (Result{Path: filepath.Join(dir, Name), Size: 9, SHA256: hex.EncodeToString(sum[:])}); r != want {
		t.Errorf("Install = %+v, want %+v", r, want)
	}
	if fi, err := os.Stat(r.Path); err != nil || fi.Mode() != Mode {
		t.Errorf("installed file %v (%v), want mode %v", fi, err, Mode)
	}
	if _, err := (&Installer{Executable: func() (string, error) { return src, nil }}).Install(filepath.Join(dir, "nope")); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing directory: %v", err)
	}
}
