// Package install is the core of `configmap-attacher install-plugin DIR` (the command is
// cmd.Install in plugin/cmd): it copies the step plugin into DIR so that an
// initContainer running the configmap-attacher image (which has no shell) can put the plugin
// into a volume it shares with the Argo Rollouts controller, whose argo-rollouts-config then
// names it with a file:// location. The step plugin is configmap-attacher-step, the step
// alone, when it sits beside the running executable (the image ships both), else the running
// executable itself, which serves the step too (a binary from go install or make build alone).
//
// The copy is atomic: the binary is written to a temporary file in DIR, synced, made 0755 and
// renamed over DIR/configmap-attacher, so the controller never sees a partial file, also when
// the initContainer is restarted halfway.
package install

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Name is the file name the binary is installed as: DIR/configmap-attacher.
const Name = "configmap-attacher"

// StepName is the step plugin's own binary, beside the full one in the image
// (/configmap-attacher-step): installed as Name when it is there.
const StepName = "configmap-attacher-step"

// Mode is the installed file's permission bits.
const Mode fs.FileMode = 0o755

// Result describes an installed binary.
type Result struct {
	Path string // DIR/configmap-attacher
	// Source is the file copied: configmap-attacher-step beside the executable, or the
	// executable itself.
	Source string
	Size   int64
	SHA256 string // hex
}

// Installer copies Executable's file into a directory.
type Installer struct {
	// Executable returns the path of the running executable, beside which StepName is looked
	// for; os.Executable when nil.
	Executable func() (string, error)
}

// Install copies the step plugin (StepName beside the executable, else the executable) into
// dir/configmap-attacher atomically with mode 0755.
func (in *Installer) Install(dir string) (Result, error) {
	exe := in.Executable
	if exe == nil {
		exe = os.Executable
	}
	src, err := exe()
	if err != nil {
		return Result{}, fmt.Errorf("locating this executable: %w", err)
	}
	src = stepPluginBeside(src)
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Result{}, fmt.Errorf("directory %s does not exist: mount a volume there (e.g. an emptyDir shared with the Argo Rollouts controller container) or create it first", dir)
	case err != nil:
		return Result{}, fmt.Errorf("directory %s: %w", dir, err)
	case !fi.IsDir():
		return Result{}, fmt.Errorf("%s is not a directory: pass the directory to install into (the binary is written as %s/%s)", dir, dir, Name)
	}
	dst := filepath.Join(dir, Name)
	if same, _ := sameFile(src, dst); same {
		return Result{}, fmt.Errorf("%s is this executable itself: install into another directory", dst)
	}

	f, err := os.Open(src)
	if err != nil {
		return Result{}, fmt.Errorf("reading this executable %s: %w", src, err)
	}
	defer f.Close()

	tmp, err := os.CreateTemp(dir, "."+Name+".tmp-*")
	if err != nil {
		if isReadOnly(err) {
			return Result{}, fmt.Errorf("cannot write to directory %s (%v): mount the volume read-write in this container (volumeMounts[].readOnly: false) and let the container's user write to it (e.g. an emptyDir, or fsGroup)", dir, err)
		}
		return Result{}, fmt.Errorf("creating a temporary file in %s: %w", dir, err)
	}
	ok := false
	defer func() {
		if !ok {
			// Best effort: the error that got us here is the one returned.
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), f)
	if err != nil {
		return Result{}, fmt.Errorf("copying %s to %s: %w", src, tmp.Name(), err)
	}
	if err := tmp.Chmod(Mode); err != nil {
		return Result{}, fmt.Errorf("chmod %o %s: %w", Mode, tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		return Result{}, fmt.Errorf("syncing %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return Result{}, fmt.Errorf("closing %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return Result{}, fmt.Errorf("renaming %s to %s: %w", tmp.Name(), dst, err)
	}
	ok = true
	// Make the rename durable; a failure here does not undo the install.
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return Result{Path: dst, Source: src, Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// stepPluginBeside is StepName in exe's directory when it is an executable file there, else exe.
func stepPluginBeside(exe string) string {
	p := filepath.Join(filepath.Dir(exe), StepName)
	if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return p
	}
	return exe
}

func isReadOnly(err error) bool {
	return errors.Is(err, syscall.EROFS) || errors.Is(err, fs.ErrPermission)
}

func sameFile(a, b string) (bool, error) {
	fa, err := os.Stat(a)
	if err != nil {
		return false, err
	}
	fb, err := os.Stat(b)
	if err != nil {
		return false, err
	}
	return os.SameFile(fa, fb), nil
}
