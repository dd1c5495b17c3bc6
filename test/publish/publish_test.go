package publish

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// chartVersion is the tests' release's chart version (ReleaseVersion without the v).
var chartVersion = strings.TrimPrefix(cluster.ReleaseVersion, "v")

// tools are the binaries publish.sh runs and the environment they run in.
type tools struct {
	crane, helm, cosign string
	// env isolates every tool: its own HOME, Docker and Helm configuration, TUF cache, and a
	// proxy on a closed loopback port for every host but 127.0.0.1 (Go never proxies
	// loopback): anything that tries to reach Rekor, Fulcio, a TUF mirror or any other
	// registry fails, so a pass proves the path is offline.
	env []string
	dir string
}

func newTools(t *testing.T) *tools {
	t.Helper()
	dir := t.TempDir()
	deadProxy := "http://127.0.0.1:9"
	tl := &tools{
		crane:  goTool(t, "crane", CranePackage, CraneVersion),
		cosign: goTool(t, "cosign", CosignPackage, CosignVersion),
		helm:   helmBin(t),
		dir:    dir,
		env: append(os.Environ(), "HOME="+dir, "DOCKER_CONFIG="+filepath.Join(dir, "docker"),
			"HELM_CACHE_HOME="+filepath.Join(dir, "helm-cache"), "HELM_CONFIG_HOME="+filepath.Join(dir, "helm-config"),
			"HELM_DATA_HOME="+filepath.Join(dir, "helm-data"), "TUF_ROOT="+filepath.Join(dir, "tuf"),
			"HTTPS_PROXY="+deadProxy, "HTTP_PROXY="+deadProxy, "https_proxy="+deadProxy, "http_proxy="+deadProxy,
			"NO_PROXY=", "no_proxy=", "COSIGN_PASSWORD=throwaway-test-password"),
	}
	return tl
}

// run runs bin with args in the tools' environment (extra env last) and returns its combined
// output.
func (tl *tools) run(ctx context.Context, extraEnv []string, bin string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = tl.dir
	cmd.Env = append(append([]string(nil), tl.env...), extraEnv...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// keyPair writes a throwaway cosign key pair (COSIGN_PASSWORD of the env) into a new
// directory and returns its private and public key files.
func (tl *tools) keyPair(t *testing.T, ctx context.Context) (string, string) {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.CommandContext(ctx, tl.cosign, "generate-key-pair")
	cmd.Dir, cmd.Env = dir, tl.env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cosign generate-key-pair: %v\n%s", err, out)
	}
	return filepath.Join(dir, "cosign.key"), filepath.Join(dir, "cosign.pub")
}

// startRegistry serves an OCI registry (go-containerregistry's pkg/registry, with the
// referrers API cosign's bundles use) over plain HTTP on 127.0.0.1 and returns HOST:PORT.
func startRegistry(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0)), registry.WithReferrersSupport(true)))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// published is what publish.sh pushed: its GITHUB_OUTPUT lines.
type published struct {
	imageRef, imageDigest, chartName, chartDigest string
}

// TestPublishLocalRegistry runs publish.sh against a registry on 127.0.0.1, verifies the
// signatures, installs the chart from the registry and runs the image's controller from the
// pushed digest.
func TestPublishLocalRegistry(t *testing.T) {
	start := time.Now()
	c := cluster.Require(t, shared, sharedErr)
	dist, err := cluster.ReleaseDist()
	if err != nil {
		t.Fatal(err)
	}
	tl := newTools(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	host := startRegistry(t)
	key, pub := tl.keyPair(t, ctx)
	t.Logf("tools ready, registry on %s, key pair made in %s", host, time.Since(start).Round(time.Millisecond))

	t0 := time.Now()
	p := runPublish(t, ctx, tl, dist, host, key)
	t.Logf("publish.sh (crane push, cosign sign and attest, helm push, cosign sign) in %s: image %s, chart %s@%s",
		time.Since(t0).Round(time.Millisecond), p.imageRef, p.chartName, p.chartDigest)
	checkRegistry(t, host, dist, p)

	t0 = time.Now()
	t.Run("cosign-verify", func(t *testing.T) { checkSignatures(t, ctx, tl, host, pub, p) })
	t.Logf("cosign verify (passes and planted failures) in %s", time.Since(t0).Round(time.Millisecond))

	t.Run("helm-install-oci", func(t *testing.T) { installFromRegistry(t, ctx, c, tl, dist, host, p) })
	t.Logf("the whole publish path in %s", time.Since(start).Round(time.Millisecond))
}

// runPublish runs publish.sh with the flags for a registry of one's own and returns what it
// wrote to GITHUB_OUTPUT. GH names no binary: a GitHub release step that ran would fail it.
func runPublish(t *testing.T, ctx context.Context, tl *tools, dist, host, key string) published {
	t.Helper()
	ghOut := filepath.Join(t.TempDir(), "github-output")
	out, err := tl.run(ctx, []string{"VERSION=" + cluster.ReleaseVersion, "CRANE=" + tl.crane, "HELM=" + tl.helm, "COSIGN=" + tl.cosign,
		"GH=" + filepath.Join(tl.dir, "no-gh-here"), "GITHUB_OUTPUT=" + ghOut},
		"bash", filepath.Join(cluster.RepoRoot(), "hack", "release", "publish.sh"),
		"--registry", host, "--key", key, "--no-tlog", "--plain-http", "--no-github-release", dist)
	if err != nil {
		t.Fatalf("publish.sh: %v", err)
	}
	if !strings.Contains(out, "# GitHub release: skipped") || strings.Contains(out, "release create") {
		t.Errorf("publish.sh --no-github-release: the GitHub release step is not skipped:\n%s", out)
	}
	b, err := os.ReadFile(ghOut)
	if err != nil {
		t.Fatalf("publish.sh wrote no GITHUB_OUTPUT: %v\n%s", err, out)
	}
	kv := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			kv[k] = v
		}
	}
	p := published{imageRef: host + "/configmap-attacher", imageDigest: kv["image-digest"], chartName: kv["chart-name"], chartDigest: kv["chart-digest"]}
	digestRE := regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	if !digestRE.MatchString(p.imageDigest) || !digestRE.MatchString(p.chartDigest) || p.chartName != host+"/charts/configmap-attacher" {
		t.Fatalf("publish.sh GITHUB_OUTPUT %q: want image-digest, chart-digest and chart-name %s/charts/configmap-attacher\n%s", b, host, out)
	}
	return p
}

// checkRegistry: the tag is the index make release built (its OCI layout's digest), and the
// chart's version tag is the digest helm printed.
func checkRegistry(t *testing.T, host, dist string, p published) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dist, "configmap-attacher-image.oci.digest"))
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.TrimSpace(string(b)); p.imageDigest != want {
		t.Errorf("publish.sh says it pushed %s, dist/ holds the index %s", p.imageDigest, want)
	}
	for ref, want := range map[string]string{
		p.imageRef + ":" + cluster.ReleaseVersion: p.imageDigest,
		p.chartName + ":" + chartVersion:          p.chartDigest,
	} {
		r, err := name.ParseReference(ref)
		if err != nil {
			t.Fatal(err)
		}
		d, err := remote.Head(r)
		if err != nil {
			t.Errorf("the registry on %s: %s: %v", host, ref, err)
			continue
		}
		if d.Digest.String() != want {
			t.Errorf("%s is %s in the registry, publish.sh pushed %s", ref, d.Digest, want)
		}
	}
}

// checkSignatures runs cosign verify as a user of a key-signed, offline publication would:
// the image index, its CycloneDX attestation and the chart pass with the public key; an
// unsigned index (the release's with one annotation more, pushed beside it) and the right
// artifacts checked against another key fail.
func checkSignatures(t *testing.T, ctx context.Context, tl *tools, host, pub string, p published) {
	offline := []string{"--insecure-ignore-tlog=true", "--allow-http-registry"}
	verify := func(key, ref string, extra ...string) (string, error) {
		cmd := "verify"
		if len(extra) > 0 {
			cmd = extra[0]
			extra = extra[1:]
		}
		args := append(append([]string{cmd, "--key", key}, offline...), extra...)
		return tl.run(ctx, nil, tl.cosign, append(args, ref)...)
	}
	image, chart := p.imageRef+"@"+p.imageDigest, p.chartName+"@"+p.chartDigest
	for _, ref := range []string{image, chart} {
		out, err := verify(pub, ref)
		if err != nil {
			t.Errorf("cosign verify %s: %v", ref, err)
			continue
		}
		if !strings.Contains(out, `"docker-manifest-digest":"`+ref[strings.LastIndex(ref, "@")+1:]+`"`) {
			t.Errorf("cosign verify %s: the signed payload does not name the digest:\n%s", ref, out)
		}
	}
	if out, err := verify(pub, image, "verify-attestation", "--type", "cyclonedx"); err != nil {
		t.Errorf("cosign verify-attestation --type cyclonedx %s: %v", image, err)
	} else if pt, subject := attestation(out); pt != "https://cyclonedx.org/bom" || subject != p.imageDigest {
		t.Errorf("cosign verify-attestation: statement of type %q about %q, want the CycloneDX SBOM of %s:\n%.2000s", pt, subject, p.imageDigest, out)
	}

	// Planted: an unsigned index in the same repository, and another key.
	unsigned := pushUnsignedIndex(t, p.imageRef+"@"+p.imageDigest, p.imageRef+":unsigned")
	if out, err := verify(pub, unsigned); err == nil {
		t.Errorf("cosign verify of the unsigned index %s passed:\n%s", unsigned, out)
	} else {
		t.Logf("unsigned index refused, as it must be: %s", lastLine(out))
	}
	_, otherPub := tl.keyPair(t, ctx)
	for _, ref := range []string{image, chart} {
		if out, err := verify(otherPub, ref); err == nil {
			t.Errorf("cosign verify %s with another key passed:\n%s", ref, out)
		} else {
			t.Logf("%s against another key refused, as it must be: %s", ref, lastLine(out))
		}
	}
}

// pushUnsignedIndex pushes the index at from, with one annotation more (so another digest that
// nobody signed), as to, and returns its REPO@DIGEST.
func pushUnsignedIndex(t *testing.T, from, to string) string {
	t.Helper()
	src, err := name.ParseReference(from)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := name.ParseReference(to)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(src)
	if err != nil {
		t.Fatal(err)
	}
	tampered, ok := mutate.Annotations(idx, map[string]string{"test.configmap-attacher/tampered": "true"}).(v1.ImageIndex)
	if !ok {
		t.Fatal("mutate.Annotations of an index is no index")
	}
	if err := remote.WriteIndex(dst, tampered); err != nil {
		t.Fatal(err)
	}
	d, err := remote.Head(dst)
	if err != nil {
		t.Fatal(err)
	}
	return dst.Context().Name() + "@" + d.Digest.String()
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// attestation returns the predicate type and the first subject's digest of the in-toto
// statement in cosign verify-attestation's output (a DSSE envelope per line).
func attestation(out string) (predicateType, subject string) {
	for _, line := range strings.Split(out, "\n") {
		var env struct{ Payload string }
		if json.Unmarshal([]byte(line), &env) != nil || env.Payload == "" {
			continue
		}
		b, err := base64.StdEncoding.DecodeString(env.Payload)
		if err != nil {
			continue
		}
		var st struct {
			PredicateType string `json:"predicateType"`
			Subject       []struct {
				Digest map[string]string `json:"digest"`
			} `json:"subject"`
		}
		if json.Unmarshal(b, &st) == nil && len(st.Subject) > 0 {
			return st.PredicateType, "sha256:" + st.Subject[0].Digest["sha256"]
		}
	}
	return "", ""
}

// TestPublishRefusesBadFlags: publish.sh refuses, before it reads DIST or pushes anything, a
// flag it does not know, --no-tlog without --key (keyless signing cannot be offline), a
// --registry with a scheme and a --key that is no file, each naming the fix.
func TestPublishRefusesBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--push-everything", "dist"}, "unknown flag --push-everything"},
		{[]string{"--no-tlog", "dist"}, "--no-tlog needs --key"},
		{[]string{"--registry", "https://registry.example.com", "dist"}, "without a scheme"},
		{[]string{"--key", filepath.Join(t.TempDir(), "missing.key"), "dist"}, "make one with cosign generate-key-pair"},
	} {
		cmd := exec.Command("bash", append([]string{filepath.Join(cluster.RepoRoot(), "hack", "release", "publish.sh")}, tc.args...)...)
		cmd.Env = append(os.Environ(), "VERSION="+cluster.ReleaseVersion)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), tc.want) {
			t.Errorf("publish.sh %q: %v, want exit 2 and %q:\n%s", tc.args, err, tc.want, out)
		}
	}
}
