package cluster

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// The release the tests build (ReleaseDist): a fixed version, SOURCE_DATE_EPOCH and revision,
// so that its bytes depend on the source tree alone.
const (
	ReleaseVersion  = "v0.0.0-releasetest"
	ReleaseEpoch    = 1700000000
	ReleaseRevision = "0123456789abcdef0123456789abcdef01234567"
)

// ReleasePlatforms are the platforms of the tests' release: the image's (linux/amd64 and
// linux/arm64). The darwin binaries of `make release` are plain cross-compiles of the same
// sources and stay in `make release` alone.
const ReleasePlatforms = "linux/amd64 linux/arm64"

var (
	releaseMu   sync.Mutex
	releaseDist string
)

// ReleaseDist returns the dist/ directory of `make release` (ReleaseVersion, ReleaseEpoch,
// ReleaseRevision, ReleasePlatforms) for the source tree as it is: built once per source tree
// and kept in CacheDir()/release-test/<key>, so that test/image and test/release (and a second
// run on unchanged sources) share one build instead of each making the multi-platform release
// (minutes on 2 cores). The key hashes the toolchain and every file CopyTree copies. Concurrent
// test binaries wait on a lock for the one that builds. The directory is read-only to callers:
// copy it (CopyTree) before changing anything. Entries unused for a day are removed.
func ReleaseDist() (string, error) {
	releaseMu.Lock()
	defer releaseMu.Unlock()
	if releaseDist != "" {
		return releaseDist, nil
	}
	root := RepoRoot()
	key, err := treeKey(root)
	if err != nil {
		return "", err
	}
	cache := filepath.Join(CacheDir(), "release-test")
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	unlock, err := lockFile(filepath.Join(cache, ".lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	dist := filepath.Join(cache, key, "dist")
	if _, err := os.Stat(filepath.Join(dist, "checksums.txt")); err != nil {
		if err := buildRelease(root, filepath.Join(cache, key)); err != nil {
			return "", err
		}
	}
	now := time.Now()
	_ = os.Chtimes(filepath.Join(cache, key), now, now) // marks the entry as used for pruneBinaries
	pruneBinaries(cache, key)
	releaseDist = dist
	return dist, nil
}

// buildRelease runs `make release` in a snapshot of root under dir/src and moves its dist/ to
// dir/dist (last, so that an interrupted build leaves no dist/ that looks complete).
func buildRelease(root, dir string) error {
	start := time.Now()
	src := filepath.Join(dir, "src")
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := CopyTree(root, src); err != nil {
		return err
	}
	if out, err := MakeRelease(src, ReleasePlatforms, nil); err != nil {
		return fmt.Errorf("make release for the tests (in %s): %w\n%s", src, err, out)
	}
	if err := os.Rename(filepath.Join(src, "dist"), filepath.Join(dir, "dist")); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "test/support/cluster: built the tests' release (%s) in %s in %v\n", ReleasePlatforms, dir, time.Since(start).Round(time.Millisecond))
	return os.RemoveAll(src)
}

// MakeRelease runs `make release` in dir for platforms (linux only: the image's architectures
// follow them) with the tests' version, epoch and revision, the shared tool cache, and env
// last (it wins), and returns make's output.
func MakeRelease(dir, platforms string, env []string) (string, error) {
	var archs []string
	for _, p := range strings.Fields(platforms) {
		goos, arch, ok := strings.Cut(p, "/")
		if !ok || goos != "linux" {
			return "", fmt.Errorf("platform %q: want linux/<arch> (the image's platforms)", p)
		}
		archs = append(archs, arch)
	}
	cmd := exec.Command("make", "release", "PLATFORMS="+platforms, "IMAGE_ARCHS="+strings.Join(archs, " "),
		"VERSION="+ReleaseVersion, "REVISION="+ReleaseRevision)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), fmt.Sprintf("SOURCE_DATE_EPOCH=%d", ReleaseEpoch), "CMA_CACHE="+CacheDir()), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// treeKey hashes the toolchain and every file CopyTree would copy from root (path, mode and
// content).
func treeKey(root string) (string, error) {
	ver, err := exec.Command("go", "env", "GOVERSION").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOVERSION: %v", err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s|%s|%s|%s|%d|%s\n", strings.TrimSpace(string(ver)), os.Getenv("GOFLAGS"), ReleasePlatforms, ReleaseVersion, ReleaseEpoch, ReleaseRevision)
	err = walkTree(root, func(rel string, d fs.DirEntry) error {
		if d.IsDir() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		c, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s %v %d\n", filepath.ToSlash(rel), fi.Mode().Perm(), len(c))
		h.Write(c)
		return nil
	})
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil))[:20], nil
}

// walkTree calls fn for the directories and regular files of the module at root, but not
// .git, bin, dist and .tmp (build outputs and scratch), in lexical order.
func walkTree(root string, fn func(rel string, d fs.DirEntry) error) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() && (rel == ".git" || rel == "bin" || rel == "dist" || rel == ".tmp") {
			return filepath.SkipDir
		}
		if !d.IsDir() && !d.Type().IsRegular() {
			return nil
		}
		return fn(rel, d)
	})
}

// CopyTree copies the module's files (not .git, bin, dist, .tmp) from src to dst, keeping
// their permission bits.
func CopyTree(src, dst string) error {
	err := walkTree(src, func(rel string, d fs.DirEntry) error {
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		return copyFile(filepath.Join(src, rel), target)
	})
	if err != nil {
		return fmt.Errorf("copying %s to %s: %w", src, dst, err)
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, fi.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
