// Package release tests `make release`: it is reproducible (the same source built twice, the
// second time in another directory, with another HOME and TZ and an empty Go build cache, gives
// every file byte for byte: binaries, image layout, chart, manifests, SBOMs; proved on one
// platform, the smallest build that exercises every step), and of the tests' shared release
// (cluster.ReleaseDist, the image's two platforms, also what test/image checks) dist/install.md
// carries the real sha256 of each linux binary, the image by its digest and the argo-helm
// values, the chart has the release's version, the manifests and the Kustomize base apply to
// the real apiserver (server-side dry run), the SBOMs name the main module at the version, and
// hack/release/publish.sh --dry-run prints the pushes and signatures of dist/'s digests.
package release

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

const (
	version = cluster.ReleaseVersion
	image   = "ghcr.io/configmap-attacher/configmap-attacher"
	epoch   = "1700000000" // cluster.ReleaseEpoch
)

var archs = []string{"amd64", "arm64"}

// reproPlatform is the one platform the reproducibility proof builds twice: every step of make
// release (binaries, image index, chart, manifests, SBOMs, checksums) runs for it, and the
// second build compiles everything again; a second architecture would double the cost and
// prove nothing more (the cross-compile is the same toolchain with another GOARCH).
const reproPlatform = "linux/amd64"

// TestReleaseReproducible builds reproPlatform's release twice, from one snapshot of the tree:
// as it is, with the usual build cache, then in another path with another HOME and TZ and an
// empty build cache, and compares every file of both dist/ directories.
func TestReleaseReproducible(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatalf("make is required: %v", err)
	}
	root := moduleRoot(t)
	tmp := t.TempDir()
	// Both builds share the module cache (the Go toolchain and the sources, checked against
	// go.sum) and the tool cache (helm, cyclonedx-gomod: built once from the module proxy);
	// what they must not share is the build cache, the path, HOME and TZ.
	shared := []string{"GOMODCACHE=" + goEnv(t, "GOMODCACHE")}

	// One snapshot of the working tree for both builds: the checkout is shared, and a file
	// edited between the two copies would make them differ.
	src := filepath.Join(tmp, "src")
	copyTree(t, root, src)

	a := filepath.Join(tmp, "a")
	copyTree(t, src, a)
	start := time.Now()
	makeRelease(t, a, shared)
	t.Logf("build 1 (%s, warm cache) in %s", reproPlatform, time.Since(start).Round(time.Millisecond))

	// Another path, another HOME and TZ, and an empty build cache: every package, the standard
	// library and hack/image's and hack/release's dependencies included, is compiled again, and
	// every artifact is made again.
	b := filepath.Join(tmp, "b", "elsewhere")
	copyTree(t, src, b)
	start = time.Now()
	makeRelease(t, b, append(shared, "GOCACHE="+filepath.Join(tmp, "gocache"), "HOME="+filepath.Join(tmp, "home"), "TZ=Pacific/Kiritimati"))
	t.Logf("build 2 (%s, empty cache, other path, HOME and TZ) in %s", reproPlatform, time.Since(start).Round(time.Millisecond))

	distA, distB := filepath.Join(a, "dist"), filepath.Join(b, "dist")
	filesA := distFiles(t, distA)
	for _, d := range compareDists(filesA, distFiles(t, distB)) {
		t.Errorf("dist/ not reproducible: %s", d)
	}
	t.Logf("dist/ of %s: %d files, byte-identical in both builds", reproPlatform, len(filesA))
	t.Run("planted-faults", func(t *testing.T) { checkPlantedFaults(t, distA, filesA) })
}

// TestReleaseArtifacts checks the tests' shared release (both image platforms) file by file.
func TestReleaseArtifacts(t *testing.T) {
	root := moduleRoot(t)
	distA, err := cluster.ReleaseDist()
	if err != nil {
		t.Fatal(err)
	}
	filesA := distFiles(t, distA)
	sumsA := readSums(t, distA)
	for _, arch := range archs {
		for _, n := range []string{"configmap-attacher-linux-" + arch, "configmap-attacher-step-linux-" + arch} {
			if got := fileSHA(t, filepath.Join(distA, n)); sumsA[n] == "" || got != sumsA[n] {
				t.Errorf("dist/%s: sha256 %s, checksums.txt says %q", n, got, sumsA[n])
			}
		}
	}
	digestA := strings.TrimSpace(readFile(t, filepath.Join(distA, "configmap-attacher-image.oci.digest")))
	if !regexp.MustCompile(`^sha256:[0-9a-f]{64}$`).MatchString(digestA) {
		t.Fatalf("image index digest %q", digestA)
	}
	checkInstallMD(t, readFile(t, filepath.Join(distA, "install.md")), sumsA, digestA)
	t.Logf("linux/amd64 %s (step %s), linux/arm64 %s (step %s), index %s", sumsA["configmap-attacher-linux-amd64"], sumsA["configmap-attacher-step-linux-amd64"],
		sumsA["configmap-attacher-linux-arm64"], sumsA["configmap-attacher-step-linux-arm64"], digestA)

	t.Run("checksums", func(t *testing.T) { checkChecksums(t, distA, filesA) })
	t.Run("chart", func(t *testing.T) { checkChart(t, distA) })
	t.Run("sboms", func(t *testing.T) { checkSBOMs(t, distA, sumsA, digestA) })
	t.Run("changelog", func(t *testing.T) { checkChangelog(t, root, distA) })
	t.Run("publish-dry-run", func(t *testing.T) { checkPublish(t, root, distA, digestA) })
	t.Run("manifests", func(t *testing.T) { checkManifests(t, distA, digestA) })
	t.Run("set-version", func(t *testing.T) { checkSetVersion(t, root) })
}

// checkInstallMD checks every YAML block of install.md: the stepPlugins entries carry each
// linux step-plugin binary's real sha256 and its download URL, and the chart values install the image by
// digest with install-plugin and a file:// location into the shared volume.
func checkInstallMD(t *testing.T, md string, sums map[string]string, digest string) {
	t.Helper()
	wantArgs := []string{"--require-opt-in", "--opt-in-selector", "configmap-attacher/revisioned=true"}
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(md, -1)
	seen, seenValues := map[string]bool{}, map[string]bool{}
	values := false
	for _, blk := range blocks {
		var doc map[string]any
		if err := yaml.Unmarshal([]byte(blk[1]), &doc); err != nil {
			t.Errorf("install.md: YAML block does not parse: %v\n%s", err, blk[1])
			continue
		}
		if sp, ok := doc["stepPlugins"].(string); ok {
			var entries []struct {
				Name, Location, SHA256 string
				Args                   []string
			}
			if err := yaml.Unmarshal([]byte(sp), &entries); err != nil || len(entries) != 1 {
				t.Errorf("install.md: stepPlugins %q: %v", sp, err)
				continue
			}
			e := entries[0]
			if !slices.Equal(e.Args, wantArgs) {
				t.Errorf("install.md: entry args %q, want the policy args %q", e.Args, wantArgs)
			}
			asset := e.Location[strings.LastIndex(e.Location, "/")+1:]
			if e.Name != "configmap-attacher/configmap-attacher" || sums[asset] == "" || e.SHA256 != sums[asset] ||
				e.Location != "https://github.com/configmap-attacher/configmap-attacher/releases/download/"+version+"/"+asset {
				t.Errorf("install.md: entry %+v: want the sha256 %q of %s", e, sums[asset], asset)
			}
			seen[asset] = true
		}
		if c, ok := doc["controller"].(map[string]any); ok && c["initContainers"] == nil {
			// The https entry as argo-helm values: controller.stepPlugins is a list, not a string.
			b, _ := yaml.Marshal(c)
			var v struct {
				StepPlugins []struct {
					Name, Location, SHA256 string
					Args                   []string
				} `json:"stepPlugins"`
			}
			if err := yaml.UnmarshalStrict(b, &v); err != nil || len(v.StepPlugins) != 1 {
				t.Errorf("install.md: chart values for the download %s: %v (want controller.stepPlugins as a list of one)", b, err)
				continue
			}
			e := v.StepPlugins[0]
			asset := e.Location[strings.LastIndex(e.Location, "/")+1:]
			if sums[asset] == "" || e.SHA256 != sums[asset] || !slices.Equal(e.Args, wantArgs) {
				t.Errorf("install.md: chart values entry %+v: want the sha256 %q of %s and the policy args", e, sums[asset], asset)
			}
			seenValues[asset] = true
			continue
		}
		if c, ok := doc["controller"].(map[string]any); ok {
			values = true
			b, _ := yaml.Marshal(c)
			var v struct {
				StepPlugins []struct {
					Name, Location string
					Args           []string
				} `json:"stepPlugins"`
				InitContainers []struct {
					Image string
					Args  []string
				} `json:"initContainers"`
				VolumeMounts []struct{ Name, MountPath string } `json:"volumeMounts"`
			}
			if err := yaml.Unmarshal(b, &v); err != nil || len(v.StepPlugins) != 1 || len(v.InitContainers) != 1 || len(v.VolumeMounts) != 1 {
				t.Errorf("install.md: chart values %s: %v", b, err)
				continue
			}
			if ic := v.InitContainers[0]; ic.Image != image+"@"+digest || strings.Join(ic.Args, " ") != "install-plugin /plugins" {
				t.Errorf("install.md: initContainer %+v, want %s@%s with install-plugin /plugins", ic, image, digest)
			}
			if !slices.Equal(v.StepPlugins[0].Args, wantArgs) {
				t.Errorf("install.md: chart values args %q, want %q", v.StepPlugins[0].Args, wantArgs)
			}
			if v.StepPlugins[0].Location != "file://"+v.VolumeMounts[0].MountPath+"/configmap-attacher" {
				t.Errorf("install.md: location %s, want the controller's mount %s", v.StepPlugins[0].Location, v.VolumeMounts[0].MountPath)
			}
		}
	}
	for _, arch := range archs {
		if n := "configmap-attacher-step-linux-" + arch; !seen[n] || !seenValues[n] {
			t.Errorf("install.md: for %s an argo-rollouts-config entry %v, chart values %v; want both", n, seen[n], seenValues[n])
		}
	}
	if !values {
		t.Errorf("install.md: no argo-rollouts chart values")
	}
	for _, want := range []string{image + "@" + digest, "mixed architectures", "2.39.1", "2.39.4", "installCRDs: false", "controller.createConfigmap"} {
		if !strings.Contains(md, want) {
			t.Errorf("install.md lacks %q", want)
		}
	}
}

// makeRelease runs make release for reproPlatform in dir (cluster.MakeRelease: the tests'
// version, epoch and revision).
func makeRelease(t *testing.T, dir string, env []string) {
	t.Helper()
	if out, err := cluster.MakeRelease(dir, reproPlatform, env); err != nil {
		t.Fatalf("make release in %s: %v\n%s", dir, err, out)
	}
}

// copyTree copies the module's files (not .git, bin, dist) from src to dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	if err := cluster.CopyTree(src, dst); err != nil {
		t.Fatal(err)
	}
}

func readSums(t *testing.T, dist string) map[string]string {
	t.Helper()
	f, err := os.Open(filepath.Join(dist, "checksums.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) == 2 {
			m[fields[1]] = fields[0]
		}
	}
	return m
}

func fileSHA(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		t.Fatalf("go env GOMOD: %q %v", out, err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}
