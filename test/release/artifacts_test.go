package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/configmap-attacher/configmap-attacher/hack/release/stamp"
	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

const (
	chartFile  = "configmap-attacher-0.0.0-releasetest.tgz"
	module     = "github.com/configmap-attacher/configmap-attacher"
	namespace  = "configmap-attacher"
	helmSubdir = "helm-v3.22.0"
)

// wantFiles are the files every release has (besides the OCI layout's blobs).
var wantFiles = []string{
	"checksums.txt", "install.md", "changelog.md", chartFile, "install.yaml", "install-namespaced.yaml",
	"kustomize/kustomization.yaml", "kustomize/install.yaml",
	"configmap-attacher-image.oci/index.json", "configmap-attacher-image.oci/oci-layout", "configmap-attacher-image.oci.digest",
	"configmap-attacher-image.cdx.json",
}

func goEnv(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("go", "env", name).Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		t.Fatalf("go env %s: %q %v", name, out, err)
	}
	return strings.TrimSpace(string(out))
}

// distFiles maps every regular file under dist (relative, slash-separated) to its sha256 and
// mode: what "byte-identical" compares.
func distFiles(t *testing.T, dist string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(dist, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dist, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("%s: not a regular file (%v)", rel, fi.Mode())
		}
		m[filepath.ToSlash(rel)] = fileSHA(t, p) + " " + fi.Mode().Perm().String()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range wantFiles {
		if m[f] == "" {
			t.Errorf("%s: no %s", dist, f)
		}
	}
	return m
}

// compareDists lists the files that differ, or are in one dist only.
func compareDists(a, b map[string]string) []string {
	var out []string
	for f, h := range a {
		switch hb, ok := b[f]; {
		case !ok:
			out = append(out, f+": only in the first build")
		case hb != h:
			out = append(out, fmt.Sprintf("%s: %s then %s", f, h, hb))
		}
	}
	for f := range b {
		if _, ok := a[f]; !ok {
			out = append(out, f+": only in the second build")
		}
	}
	slices.Sort(out)
	return out
}

// checkPlantedFaults shows that the comparison can fail: a dist with one file changed as a
// timestamp would change it, and one file more, is caught; and helm package's own archive, made
// twice, differs (the reason make release normalises it) while the normalised ones do not.
func checkPlantedFaults(t *testing.T, dist string, files map[string]string) {
	dir := t.TempDir()
	copyTree(t, dist, dir)
	sbom := filepath.Join(dir, "configmap-attacher-linux-amd64.cdx.json")
	b := readFile(t, sbom)
	if !strings.Contains(b, `"timestamp": "2023-11-14T22:13:20Z"`) {
		t.Fatalf("%s: no SOURCE_DATE_EPOCH timestamp to plant a fault in", sbom)
	}
	writeTestFile(t, sbom, strings.Replace(b, "2023-11-14T22:13:20Z", time.Now().UTC().Format(time.RFC3339), 1))
	writeTestFile(t, filepath.Join(dir, "stray.txt"), "x")
	got := compareDists(files, distFiles(t, dir))
	if len(got) != 2 || !strings.HasPrefix(got[0], "configmap-attacher-linux-amd64.cdx.json: ") || !strings.HasPrefix(got[1], "stray.txt: only in the second") {
		t.Errorf("planted: a changed SBOM timestamp and a stray file: compareDists found %q", got)
	}

	// helm package itself is not reproducible: every tar entry carries the time of packaging.
	helm := filepath.Join(cluster.CacheDir(), helmSubdir, "helm")
	chart := filepath.Join(moduleRoot(t), "charts", "configmap-attacher")
	var raw [2][]byte
	for i := range raw {
		if i == 1 {
			time.Sleep(1100 * time.Millisecond) // tar times are in seconds
		}
		out := filepath.Join(dir, "helm", strconv.Itoa(i))
		cmd := exec.Command(helm, "package", chart, "-d", out)
		cmd.Env = append(os.Environ(), "HOME="+filepath.Join(dir, "helmhome"))
		if o, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("helm package: %v\n%s", err, o)
		}
		m, _ := filepath.Glob(filepath.Join(out, "*.tgz"))
		if len(m) != 1 {
			t.Fatalf("helm package wrote %v", m)
		}
		raw[i] = []byte(readFile(t, m[0]))
	}
	if bytes.Equal(raw[0], raw[1]) {
		t.Errorf("helm package gave the same bytes twice: its output is reproducible now; make release's normalisation may be dropped")
	} else {
		t.Logf("helm package twice, 1 s apart: %d and %d bytes, different (make release normalises them)", len(raw[0]), len(raw[1]))
	}
}

// checkChecksums: checksums.txt lists every file but itself and the layout's blobs, each with
// its sha256.
func checkChecksums(t *testing.T, dist string, files map[string]string) {
	sums := readSums(t, dist)
	for f, h := range files {
		if f == "checksums.txt" || strings.HasPrefix(f, "configmap-attacher-image.oci/") {
			continue
		}
		if sums[f] == "" || !strings.HasPrefix(h, sums[f]+" ") {
			t.Errorf("checksums.txt: %s %q, the file's sha256 %s", f, sums[f], h)
		}
	}
	for f := range sums {
		if files[f] == "" {
			t.Errorf("checksums.txt lists %s, which dist/ does not have", f)
		}
	}
}

// checkChart: the packaged chart has the release's version and appVersion (also in its image
// annotation), and every tar entry the time of SOURCE_DATE_EPOCH.
func checkChart(t *testing.T, dist string) {
	n, _ := strconv.ParseInt(epoch, 10, 64)
	f, err := os.Open(filepath.Join(dist, chartFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	if !zr.ModTime.Equal(time.Unix(n, 0)) {
		t.Errorf("gzip header time %v, want SOURCE_DATE_EPOCH", zr.ModTime)
	}
	tr := tar.NewReader(zr)
	var chartYAML []byte
	entries := 0
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		entries++
		if !h.ModTime.Equal(time.Unix(n, 0)) {
			t.Errorf("%s: time %v, want SOURCE_DATE_EPOCH %s", h.Name, h.ModTime, epoch)
		}
		if h.Name == "configmap-attacher/Chart.yaml" {
			chartYAML, _ = io.ReadAll(tr)
		}
	}
	var c struct {
		Name, Version, AppVersion string
		Annotations               map[string]string
	}
	if err := yaml.Unmarshal(chartYAML, &c); err != nil {
		t.Fatalf("Chart.yaml in %s: %v", chartFile, err)
	}
	if c.Name != "configmap-attacher" || c.Version != strings.TrimPrefix(version, "v") || c.AppVersion != version {
		t.Errorf("%s: Chart.yaml name %q version %q appVersion %q, want %s", chartFile, c.Name, c.Version, c.AppVersion, version)
	}
	if imgs := c.Annotations["artifacthub.io/images"]; imgs != "" && !strings.Contains(imgs, image+":"+version) {
		t.Errorf("%s: artifacthub.io/images %q lacks %s:%s", chartFile, imgs, image, version)
	}
	t.Logf("%s: %d entries, version %s, appVersion %s", chartFile, entries, c.Version, c.AppVersion)
}

type bom struct {
	BOMFormat, SpecVersion, SerialNumber string
	Metadata                             struct {
		Timestamp string
		Component struct{ Type, Name, Version, Purl string }
	}
	Components []struct {
		Type, Name, Version, Purl string
		BOMRef                    string `json:"bom-ref"`
		Hashes                    []struct{ Alg, Content string }
	}
}

// checkSBOMs: every binary has a CycloneDX SBOM naming the main module at the release's version
// with a serial number and SOURCE_DATE_EPOCH's time; the image's names the index by digest
// and holds each linux binary with its sha256.
func checkSBOMs(t *testing.T, dist string, sums map[string]string, digest string) {
	n, _ := strconv.ParseInt(epoch, 10, 64)
	wantTime := time.Unix(n, 0).UTC().Format(time.RFC3339)
	serials := map[string]string{}
	parse := func(f string) bom {
		var b bom
		if err := json.Unmarshal([]byte(readFile(t, filepath.Join(dist, f))), &b); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if b.BOMFormat != "CycloneDX" || b.SpecVersion == "" || !strings.HasPrefix(b.SerialNumber, "urn:uuid:") || b.Metadata.Timestamp != wantTime {
			t.Errorf("%s: format %q %q, serial %q, timestamp %q (want %s)", f, b.BOMFormat, b.SpecVersion, b.SerialNumber, b.Metadata.Timestamp, wantTime)
		}
		if other, dup := serials[b.SerialNumber]; dup {
			t.Errorf("%s and %s share the serial number %s", f, other, b.SerialNumber)
		}
		serials[b.SerialNumber] = f
		return b
	}
	for name := range sums {
		if strings.Contains(name, ".") || strings.Contains(name, "/") {
			continue
		}
		b := parse(name + ".cdx.json")
		if c := b.Metadata.Component; c.Name != module || c.Version != version || !strings.Contains(c.Purl, "@"+version) {
			t.Errorf("%s.cdx.json: main component %+v, want %s at %s", name, c, module, version)
		}
		if !slices.ContainsFunc(b.Components, func(c struct {
			Type, Name, Version, Purl string
			BOMRef                    string `json:"bom-ref"`
			Hashes                    []struct{ Alg, Content string }
		}) bool {
			return c.Name == "k8s.io/client-go"
		}) {
			t.Errorf("%s.cdx.json lists no k8s.io/client-go among %d components", name, len(b.Components))
		}
	}
	img := parse("configmap-attacher-image.cdx.json")
	if c := img.Metadata.Component; c.Type != "container" || c.Name != image || c.Version != version || !strings.Contains(c.Purl, strings.ReplaceAll(digest, ":", "%3A")) {
		t.Errorf("image SBOM: component %+v, want the container %s at %s, %s", c, image, version, digest)
	}
	found := 0
	for _, c := range img.Components {
		if c.Type != "application" {
			continue
		}
		found++
		if c.Name != module || c.Version != version || len(c.Hashes) != 1 || !slices.Contains(mapValues(sums), c.Hashes[0].Content) {
			t.Errorf("image SBOM: binary %+v, want %s at %s with a linux binary's sha256", c, module, version)
		}
	}
	if found != 2*len(archs) {
		t.Errorf("image SBOM: %d binaries, want %d (the full and the step binary per arch)", found, 2*len(archs))
	}
	t.Logf("%d SBOMs, the image's with %d components", len(serials), len(img.Components))
}

func mapValues(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// checkChangelog: dist/changelog.md is docs/changelog.md's section for the version (the test's
// has none: the Unreleased section, said so).
func checkChangelog(t *testing.T, root, dist string) {
	got := readFile(t, filepath.Join(dist, "changelog.md"))
	src := readFile(t, filepath.Join(root, "docs", "changelog.md"))
	i := strings.Index(src, "\n## Unreleased\n")
	if i < 0 {
		t.Skip("docs/changelog.md has no Unreleased section to compare with")
	}
	body := src[i+len("\n## Unreleased\n"):]
	if j := strings.Index(body, "\n## "); j >= 0 {
		body = body[:j]
	}
	if !strings.HasPrefix(got, "# configmap-attacher "+version+"\n") || !strings.Contains(got, strings.TrimSpace(body)) || !strings.Contains(got, "Unreleased") {
		t.Errorf("changelog.md does not hold the Unreleased section of docs/changelog.md:\n%.600s", got)
	}
}

// checkPublish runs hack/release/publish.sh --dry-run on dist: it prints the push of the layout,
// the signatures and the SBOM attestation of the index's digest, the chart's push, and the
// GitHub release with every top-level file; with the digest file gone, a file edited, or the
// layout's index changed it refuses.
func checkPublish(t *testing.T, root, dist, digest string) {
	run := func(dist string) (string, error) {
		cmd := exec.Command("bash", filepath.Join(root, "hack", "release", "publish.sh"), "--dry-run", dist)
		cmd.Env = append(os.Environ(), "VERSION="+version, "IMAGE_REPO="+image, "CHART_REPO=oci://ghcr.io/configmap-attacher/charts", "GITHUB_OUTPUT=")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run(dist)
	if err != nil {
		t.Fatalf("publish.sh --dry-run: %v\n%s", err, out)
	}
	ref := image + "@" + digest
	for _, want := range []string{
		"+ crane push " + filepath.Join(dist, "configmap-attacher-image.oci") + " " + image + ":" + version,
		"+ cosign sign --yes " + ref,
		"+ cosign attest --yes --type cyclonedx --predicate " + filepath.Join(dist, "configmap-attacher-image.cdx.json") + " " + ref,
		"+ helm push " + filepath.Join(dist, chartFile) + " oci://ghcr.io/configmap-attacher/charts",
		"+ cosign sign --yes ghcr.io/configmap-attacher/charts/configmap-attacher@",
		"layer sha256:" + fileSHA(t, filepath.Join(dist, chartFile)),
		"+ gh release create " + version + " --verify-tag",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("publish.sh --dry-run lacks %q:\n%s", want, out)
		}
	}
	for _, f := range []string{"install.yaml", "install-namespaced.yaml", chartFile, "configmap-attacher-image.cdx.json", "checksums.txt", "changelog.md", "configmap-attacher-step-linux-arm64"} {
		if !strings.Contains(out, " "+filepath.Join(dist, f)) {
			t.Errorf("publish.sh --dry-run uploads no %s", f)
		}
	}
	// Planted: no digest file, and a file changed after the release: both refused.
	bad := t.TempDir()
	copyTree(t, dist, bad)
	if err := os.Remove(filepath.Join(bad, "configmap-attacher-image.oci.digest")); err != nil {
		t.Fatal(err)
	}
	if out, err := run(bad); err == nil || !strings.Contains(out, "configmap-attacher-image.oci.digest missing") {
		t.Errorf("publish.sh without the digest file: %v\n%s", err, out)
	}
	copyTree(t, dist, bad)
	writeTestFile(t, filepath.Join(bad, "install.yaml"), "# edited after make release\n")
	if out, err := run(bad); err == nil || !strings.Contains(out, "checksums.txt does not match") {
		t.Errorf("publish.sh with install.yaml changed after the release: %v\n%s", err, out)
	}
	// Planted: the layout's index blob changed (the layout is not in checksums.txt): refused
	// before anything is pushed or tagged.
	copyTree(t, dist, bad)
	blob := filepath.Join(bad, "configmap-attacher-image.oci", "blobs", "sha256", strings.TrimPrefix(digest, "sha256:"))
	writeTestFile(t, blob, "{}")
	if out, err := run(bad); err == nil || !strings.Contains(out, "is missing or changed") || strings.Contains(out, "+ crane push") {
		t.Errorf("publish.sh with the index blob changed: %v\n%s", err, out)
	}
}

// checkManifests applies install.yaml, install-namespaced.yaml and the Kustomize base (built by
// the real kustomize in kubectl) to the real apiserver with a server-side dry run, and checks
// each runs the image by digest; the namespaced one creates nothing cluster-scoped but the
// Namespace.
func checkManifests(t *testing.T, dist, digest string) {
	c := cluster.Start(t, cluster.Options{NoControllerManager: true})
	kubectl := func(stdin []byte, args ...string) (string, error) {
		cmd := exec.Command(filepath.Join(c.BinDir, "kubectl"), append([]string{"--kubeconfig", c.KubeconfigPath}, args...)...)
		cmd.Stdin = bytes.NewReader(stdin)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			return stdout.String(), fmt.Errorf("kubectl %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		return stdout.String(), nil
	}
	// A server-side dry run does not create the Namespace the other objects are in.
	if _, err := kubectl([]byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: "+namespace+"}\n"), "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	kust, err := kubectl(nil, "kustomize", filepath.Join(dist, "kustomize"))
	if err != nil {
		t.Fatalf("kubectl kustomize dist/kustomize: %v", err)
	}
	for _, m := range []struct {
		name string
		doc  []byte
	}{
		{"install.yaml", []byte(readFile(t, filepath.Join(dist, "install.yaml")))},
		{"install-namespaced.yaml", []byte(readFile(t, filepath.Join(dist, "install-namespaced.yaml")))},
		{"kustomize", []byte(kust)},
	} {
		objs := docs(t, m.name, m.doc)
		res, err := kubectl(m.doc, "apply", "--server-side", "--dry-run=server", "--field-manager=release-test", "-f", "-")
		if err != nil {
			t.Errorf("%s: server-side dry run: %v", m.name, err)
			continue
		}
		if n := strings.Count(strings.TrimSpace(res), "\n") + 1; n != len(objs) {
			t.Errorf("%s: dry run applied %d objects, the file has %d", m.name, n, len(objs))
		}
		var images []string
		for _, o := range objs {
			kind, _ := o["kind"].(string)
			if m.name == "install-namespaced.yaml" && kind != "Namespace" && (kind == "ClusterRole" || kind == "ClusterRoleBinding" || strings.HasPrefix(kind, "Cluster") || strings.HasPrefix(kind, "ValidatingAdmissionPolicy")) {
				t.Errorf("install-namespaced.yaml has a %s", kind)
			}
			if kind == "Deployment" {
				spec, _ := o["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
				for _, ctr := range spec["containers"].([]any) {
					images = append(images, ctr.(map[string]any)["image"].(string))
				}
			}
		}
		if len(images) != 1 || images[0] != image+"@"+digest {
			t.Errorf("%s: Deployment images %q, want %s@%s", m.name, images, image, digest)
		}
		t.Logf("%s: %d objects, server-side dry run accepted, image %s", m.name, len(objs), images)
	}
}

// docs parses a multi-document YAML stream into its non-empty objects.
func docs(t *testing.T, what string, b []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, d := range strings.Split("\n"+string(b), "\n---") {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(d), &m); err != nil {
			t.Fatalf("%s: %v\n%s", what, err, d)
		}
		if len(m) > 0 {
			out = append(out, m)
		}
	}
	return out
}

func writeTestFile(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// checkSetVersion bumps a copy of the tree with make set-version and checks what the unit test
// of hack/release/stamp cannot: the chart rendered by the real helm after the bump is the
// chart rendered before it with every mention stamped, so the generated Kustomize base
// (examples/kustomize/controller/install.yaml) stays the chart's output; make check-version
// agrees, and with the tag as VERSION it refuses a changelog without the tag's section.
func checkSetVersion(t *testing.T, src string) {
	const nv = "v1.2.3-rc.1"
	dir := filepath.Join(t.TempDir(), "tree")
	copyTree(t, src, dir)
	mk := func(args ...string) (string, error) {
		cmd := exec.Command("make", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOTOOLCHAIN=go1.26.11")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := mk("set-version", "VERSION="+nv); err != nil {
		t.Fatalf("make set-version: %v\n%s", err, out)
	}
	if out, err := mk("check-version"); err != nil || !strings.Contains(out, nv+", and all") {
		t.Errorf("make check-version after the bump: %v\n%s", err, out)
	}
	if out, err := mk("check-version", "VERSION="+nv); err == nil || !strings.Contains(out, `no section "## `+nv+`"`) {
		t.Errorf("make check-version VERSION=%s without its changelog section: %v, want a refusal naming it\n%s", nv, err, out)
	}
	render := func(root string) []byte {
		cmd := exec.Command(filepath.Join(cluster.CacheDir(), helmSubdir, "helm"), "template", "configmap-attacher", filepath.Join(root, "charts", "configmap-attacher"), "-n", namespace)
		cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("helm template %s: %v", root, err)
		}
		return out
	}
	before, after := render(src), render(dir)
	if bytes.Equal(before, after) {
		t.Fatalf("the chart renders the same before and after set-version %s", nv)
	}
	if got := stamp.Text("examples/kustomize/controller/install.yaml", before, nv); !bytes.Equal(got, after) {
		t.Errorf("the chart rendered after set-version differs from the render before it stamped with %s: the generated Kustomize base would drift", nv)
	}
}
