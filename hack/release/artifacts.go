package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha1" //nolint:gosec // UUID version 5 is defined with SHA-1; it names, it does not protect.
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/configmap-attacher/configmap-attacher/hack/release/stamp"
)

// Paths of the artifacts in dist/, beside the binaries, checksums.txt, the image layout and
// install.md.
const (
	InstallYAML           = "install.yaml"
	InstallNamespacedYAML = "install-namespaced.yaml"
	KustomizeDir          = "kustomize"
	ImageSBOM             = "configmap-attacher-image.cdx.json"
	ChangelogMD           = "changelog.md"
	ImageLayout           = "configmap-attacher-image.oci"
	// Namespace is the namespace install.yaml creates and the chart is rendered for.
	Namespace = "configmap-attacher"
	// Module is the main module every binary's SBOM names.
	Module = "github.com/configmap-attacher/configmap-attacher"
)

// ChartFile is the packaged chart's name in dist/ for version v (helm package's own naming).
func ChartFile(v string) string { return "configmap-attacher-" + stamp.ChartVersion(v) + ".tgz" }

// SBOMFile is the CycloneDX SBOM of the binary named bin.
func SBOMFile(bin string) string { return bin + ".cdx.json" }

// artifacts are the inputs of everything make release writes after install.md.
type artifacts struct {
	dist, version, image, digest string
	helm, cyclonedx              string
	chartDir, changelog, kbase   string
	created                      time.Time
	stdout                       io.Writer
}

func (a artifacts) write() error {
	steps := []struct {
		name string
		fn   func() error
	}{
		{"chart", a.chart},
		{"install manifests", a.manifests},
		{"kustomize base", a.kustomize},
		{"SBOMs", a.sboms},
		{"changelog", a.changelogSection},
		{"checksums", a.checksums},
	}
	for _, s := range steps {
		start := time.Now()
		if err := s.fn(); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		fmt.Fprintf(a.stdout, "%s: done in %s\n", s.name, time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// helmCmd runs helm with a HOME, cache and config of its own: no repositories, plugins or
// registry logins of the user's reach the release.
func (a artifacts) helmCmd(args ...string) ([]byte, error) {
	home, err := os.MkdirTemp("", "release-helm-")
	if err != nil {
		return nil, err
	}
	// A temporary directory left behind is harmless; the release does not depend on it.
	defer func() { _ = os.RemoveAll(home) }()
	cmd := exec.Command(a.helm, args...)
	cmd.Env = append(os.Environ(), "HOME="+home, "HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s: %w\n%s", a.helm, strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes(), nil
}

// chart packages the chart with the release's version and appVersion (helm package rewrites
// Chart.yaml in the archive) and normalises the archive: helm stamps every tar entry with the
// time of packaging, so two runs differ; Normalise sets every time to SOURCE_DATE_EPOCH and
// writes the gzip stream with a fixed header, so the same chart gives the same bytes (and the
// same digest once `helm push`ed).
func (a artifacts) chart() error {
	// A copy with the version stamped into Chart.yaml: --version and --app-version set those
	// two fields only, not the image tag of its artifacthub.io/images annotation.
	tmp, err := os.MkdirTemp("", "release-chart-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	dir := filepath.Join(tmp, filepath.Base(a.chartDir))
	if err := os.CopyFS(dir, os.DirFS(a.chartDir)); err != nil {
		return fmt.Errorf("copying %s: %w", a.chartDir, err)
	}
	cy := filepath.Join(dir, "Chart.yaml")
	b, err := os.ReadFile(cy)
	if err != nil {
		return err
	}
	if err := os.WriteFile(cy, stamp.Text("charts/configmap-attacher/Chart.yaml", b, a.version), 0o644); err != nil {
		return err
	}
	if _, err := a.helmCmd("package", dir, "--version", stamp.ChartVersion(a.version), "--app-version", a.version, "-d", a.dist); err != nil {
		return err
	}
	p := filepath.Join(a.dist, ChartFile(a.version))
	b, err = os.ReadFile(p)
	if err != nil {
		return fmt.Errorf("helm package wrote no %s: %w", p, err)
	}
	nb, err := NormaliseTgz(b, a.created)
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	return os.WriteFile(p, nb, 0o644)
}

// NormaliseTgz rewrites a gzipped tar with every entry's times set to t, no owner names, and
// the gzip header's time set to t (the comment and extra field, which helm sets, are kept).
func NormaliseTgz(b []byte, t time.Time) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	zw, err := gzip.NewWriterLevel(&out, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	zw.Header = gzip.Header{Comment: zr.Comment, Extra: zr.Extra, ModTime: t, OS: 255}
	tr, tw := tar.NewReader(zr), tar.NewWriter(zw)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		nh := &tar.Header{Typeflag: h.Typeflag, Name: h.Name, Linkname: h.Linkname, Size: h.Size, Mode: h.Mode, ModTime: t, Format: tar.FormatPAX}
		if err := tw.WriteHeader(nh); err != nil {
			return nil, err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// render is `helm template` of the packaged chart as release configmap-attacher in
// namespace configmap-attacher, without the chart's `helm test` and uninstall hooks (applied
// by kubectl they would be ordinary objects and run at once).
func (a artifacts) render(set ...string) ([]byte, error) {
	args := []string{"template", "configmap-attacher", filepath.Join(a.dist, ChartFile(a.version)), "-n", Namespace, "--skip-tests", "--no-hooks"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	return a.helmCmd(args...)
}

// namespaceDoc is install.yaml's first object: the namespace, with Pod Security's restricted
// level enforced (the chart's pod passes it).
const namespaceDoc = `---
apiVersion: v1
kind: Namespace
metadata:
  name: ` + Namespace + `
  labels:
    pod-security.kubernetes.io/enforce: restricted
`

// manifests writes install.yaml (cluster-wide: every namespace, a ClusterRole) and
// install-namespaced.yaml (only the namespace it is installed in: a Role there, nothing
// cluster-scoped but the Namespace), both with the image by digest.
func (a artifacts) manifests() error {
	img := "image.digest=" + a.digest
	for _, m := range []struct {
		file, what string
		set        []string
	}{
		{InstallYAML, "cluster-wide: watches every namespace (a ClusterRole and ClusterRoleBinding)", []string{img}},
		// Nothing cluster-scoped: not the admission policy either (an administrator applies the
		// chart's separately).
		{InstallNamespacedYAML, "namespaced: watches only namespace " + Namespace + " (a Role and RoleBinding there, no cluster-wide RBAC, no admission policy)", []string{img, "rbac.scope=namespaces", "namespaces={" + Namespace + "}", "admissionPolicy.enabled=false"}},
	} {
		out, err := a.render(m.set...)
		if err != nil {
			return err
		}
		head := fmt.Sprintf("# configmap-attacher %s, the controller mode, %s.\n"+
			"# The chart %s rendered with its defaults (release configmap-attacher, namespace %s),\n"+
			"# the image by digest. Apply with:\n"+
			"#   kubectl apply --server-side -f https://github.com/configmap-attacher/configmap-attacher/releases/download/%s/%s\n",
			a.version, m.what, ChartFile(a.version), Namespace, a.version, m.file)
		if err := os.WriteFile(filepath.Join(a.dist, m.file), []byte(head+namespaceDoc+string(out)), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// kustomize writes dist/kustomize: the base of examples/kustomize/controller with the
// release's chart rendered (the image by tag) and the image pinned by digest in its images:
// (a user's overlay can change either).
func (a artifacts) kustomize() error {
	dir := filepath.Join(a.dist, KustomizeDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	k, err := os.ReadFile(filepath.Join(a.kbase, "kustomization.yaml"))
	if err != nil {
		return err
	}
	if bytes.Contains(k, []byte("\nimages:")) {
		return fmt.Errorf("%s/kustomization.yaml already has images: (make release appends the release's)", a.kbase)
	}
	k = stamp.Text("examples/kustomize/controller/kustomization.yaml", k, a.version)
	k = append(k, []byte(fmt.Sprintf("# The release's image, by digest (the index of %s).\nimages:\n  - name: %s\n    digest: %s\n", Platforms(Archs), a.image, a.digest))...)
	out, err := a.render()
	if err != nil {
		return err
	}
	head := fmt.Sprintf("# configmap-attacher %s: the chart %s rendered with its defaults (release\n# configmap-attacher, namespace %s) by make release. Do not edit.\n", a.version, ChartFile(a.version), Namespace)
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), k, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "install.yaml"), append([]byte(head), out...), 0o644)
}

// binaries are dist's binaries (configmap-attacher-OS-ARCH, configmap-attacher-step-OS-ARCH),
// sorted.
func (a artifacts) binaries() ([]string, error) {
	ents, err := os.ReadDir(a.dist)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		n := e.Name()
		if e.Type().IsRegular() && strings.HasPrefix(n, "configmap-attacher-") && !strings.Contains(n, ".") &&
			(strings.Contains(n, "-linux-") || strings.Contains(n, "-darwin-")) {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no binaries in %s (make release-binaries first)", a.dist)
	}
	return out, nil
}

// sboms writes a CycloneDX SBOM per binary (cyclonedx-gomod bin: the module list Go embedded
// in the binary, read offline) and one for the image, made from its linux binaries' SBOMs.
func (a artifacts) sboms() error {
	bins, err := a.binaries()
	if err != nil {
		return err
	}
	var linux []sbomOf
	for _, b := range bins {
		// Run in dist/ with the bare name: the SBOM records the name it was given.
		cmd := exec.Command(a.cyclonedx, "bin", "-json", "-noserial", "-notimestamp", "-version", a.version, "-output", "-", b)
		cmd.Dir = a.dist
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s bin %s: %w\n%s", a.cyclonedx, b, err, stderr.String())
		}
		sum, err := fileSHA256(filepath.Join(a.dist, b))
		if err != nil {
			return err
		}
		doc, err := a.normaliseSBOM(stdout.Bytes(), "binary "+b+" "+sum)
		if err != nil {
			return fmt.Errorf("%s: %w", b, err)
		}
		if err := writeJSON(filepath.Join(a.dist, SBOMFile(b)), doc); err != nil {
			return err
		}
		if arch, ok := strings.CutPrefix(strings.TrimPrefix(b, "configmap-attacher-step"), "-linux-"); ok || strings.HasPrefix(b, "configmap-attacher-linux-") {
			if !ok {
				arch = strings.TrimPrefix(b, "configmap-attacher-linux-")
			}
			path := "/configmap-attacher"
			if strings.HasPrefix(b, "configmap-attacher-step-") {
				path = "/configmap-attacher-step"
			}
			linux = append(linux, sbomOf{name: b, arch: arch, path: path, sha256: sum, doc: doc})
		}
	}
	doc, err := a.imageSBOM(linux)
	if err != nil {
		return err
	}
	return writeJSON(filepath.Join(a.dist, ImageSBOM), doc)
}

type sbomOf struct {
	name, arch, path, sha256 string
	doc                      map[string]any
}

// normaliseSBOM gives cyclonedx-gomod's output a serial number derived from what it
// describes (a UUID version 5 of name), SOURCE_DATE_EPOCH as its timestamp, and drops the hashes
// of cyclonedx-gomod itself: they hash the locally built tool, whose bytes depend on the
// builder's module cache path, not on the release.
func (a artifacts) normaliseSBOM(b []byte, name string) (map[string]any, error) {
	var doc map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("cyclonedx-gomod output: %w", err)
	}
	doc["serialNumber"] = "urn:uuid:" + uuid5(a.version+" "+name)
	md, _ := doc["metadata"].(map[string]any)
	if md == nil {
		return nil, fmt.Errorf("cyclonedx-gomod output has no metadata")
	}
	md["timestamp"] = a.created.UTC().Format(time.RFC3339)
	if tools, ok := md["tools"].([]any); ok {
		for _, t := range tools {
			if m, ok := t.(map[string]any); ok {
				delete(m, "hashes")
			}
		}
	}
	return doc, nil
}

// imageSBOM describes the image index: the container, the binaries it holds per
// architecture, and the union of their Go modules (purls without the goos/goarch qualifiers:
// one module serves both architectures).
func (a artifacts) imageSBOM(bins []sbomOf) (map[string]any, error) {
	if len(bins) == 0 {
		return nil, fmt.Errorf("no linux binaries for the image's SBOM")
	}
	repo := a.image[strings.LastIndex(a.image, "/")+1:]
	purl := fmt.Sprintf("pkg:oci/%s@%s?repository_url=%s&tag=%s", repo, strings.ReplaceAll(a.digest, ":", "%3A"), a.image, a.version)
	modules := map[string]map[string]any{}
	var comps []any
	var deps []any
	var binRefs []string
	for _, s := range bins {
		mc, _ := s.doc["metadata"].(map[string]any)["component"].(map[string]any)
		if mc == nil {
			return nil, fmt.Errorf("%s: SBOM has no metadata.component", s.name)
		}
		ref := fmt.Sprintf("%s#image:linux/%s:%s", purl, s.arch, s.path)
		binRefs = append(binRefs, ref)
		comps = append(comps, map[string]any{
			"bom-ref": ref, "type": "application", "name": mc["name"], "version": mc["version"], "purl": mc["purl"],
			"hashes": []any{map[string]any{"alg": "SHA-256", "content": s.sha256}},
			"properties": []any{
				map[string]any{"name": "configmap-attacher:image:path", "value": s.path},
				map[string]any{"name": "configmap-attacher:image:platform", "value": "linux/" + s.arch},
				map[string]any{"name": "configmap-attacher:release:asset", "value": s.name},
			},
		})
		var on []string
		list, _ := s.doc["components"].([]any)
		for _, c := range list {
			m, ok := c.(map[string]any)
			if !ok {
				continue
			}
			r, _ := m["bom-ref"].(string)
			on = append(on, r)
			if _, seen := modules[r]; seen {
				continue
			}
			cp := map[string]any{}
			for k, v := range m {
				cp[k] = v
			}
			if p, ok := cp["purl"].(string); ok {
				cp["purl"] = stripArch(p)
			}
			modules[r] = cp
		}
		sort.Strings(on)
		deps = append(deps, map[string]any{"ref": ref, "dependsOn": on})
	}
	refs := make([]string, 0, len(modules))
	for r := range modules {
		refs = append(refs, r)
	}
	sort.Strings(refs)
	for _, r := range refs {
		comps = append(comps, modules[r])
		deps = append(deps, map[string]any{"ref": r, "dependsOn": []any{}})
	}
	deps = append([]any{map[string]any{"ref": purl, "dependsOn": binRefs}}, deps...)
	tools := bins[0].doc["metadata"].(map[string]any)["tools"]
	return map[string]any{
		"$schema":      "http://cyclonedx.org/schema/bom-1.6.schema.json",
		"bomFormat":    "CycloneDX",
		"specVersion":  "1.6",
		"serialNumber": "urn:uuid:" + uuid5(a.version+" image "+a.image+"@"+a.digest),
		"version":      1,
		"metadata": map[string]any{
			"timestamp": a.created.UTC().Format(time.RFC3339),
			"tools":     tools,
			"component": map[string]any{
				"bom-ref": purl, "type": "container", "name": a.image, "version": a.version, "purl": purl,
				"hashes": []any{map[string]any{"alg": "SHA-256", "content": strings.TrimPrefix(a.digest, "sha256:")}},
			},
			"properties": []any{map[string]any{"name": "configmap-attacher:sbom:made-from", "value": "the SBOMs of the image's binaries (cyclonedx-gomod bin), by make release"}},
		},
		"components":   comps,
		"dependencies": deps,
	}, nil
}

// stripArch drops the goos and goarch qualifiers of a golang purl.
func stripArch(p string) string {
	base, q, ok := strings.Cut(p, "?")
	if !ok {
		return p
	}
	frag := ""
	if i := strings.Index(q, "#"); i >= 0 {
		q, frag = q[:i], q[i:]
	}
	var keep []string
	for _, kv := range strings.Split(q, "&") {
		if !strings.HasPrefix(kv, "goos=") && !strings.HasPrefix(kv, "goarch=") {
			keep = append(keep, kv)
		}
	}
	if len(keep) == 0 {
		return base + frag
	}
	return base + "?" + strings.Join(keep, "&") + frag
}

// uuid5 is the RFC 9562 name-based UUID (SHA-1) of name in the URL namespace: the same name
// gives the same serial number.
func uuid5(name string) string {
	ns := []byte{0x6b, 0xa7, 0xb8, 0x11, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8}
	h := sha1.New() //nolint:gosec // see the import
	h.Write(ns)
	h.Write([]byte(name))
	u := h.Sum(nil)[:16]
	u[6] = (u[6] & 0x0f) | 0x50
	u[8] = (u[8] & 0x3f) | 0x80
	x := hex.EncodeToString(u)
	return x[0:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:]
}

func writeJSON(p string, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	return os.WriteFile(p, buf.Bytes(), 0o644)
}

// changelogSection writes dist/changelog.md: docs/changelog.md's section of the version (or
// its Unreleased section, said so, when there is none yet), the release's notes on GitHub.
func (a artifacts) changelogSection() error {
	md, err := os.ReadFile(a.changelog)
	if err != nil {
		return err
	}
	body, unreleased, err := stamp.ChangelogSection(md, a.version)
	if err != nil {
		return err
	}
	head := "# configmap-attacher " + a.version + "\n\n"
	if unreleased {
		head += "(From the Unreleased section of docs/changelog.md: it has no section " + a.version + " yet.)\n\n"
	}
	tail := "\n\nInstall: install.md of this release (the argo-rollouts-config entries with each binary's sha256, the image by digest);\n" +
		"the controller: install.yaml, install-namespaced.yaml, the chart " + ChartFile(a.version) + " (also oci://ghcr.io/configmap-attacher/charts/configmap-attacher)\n" +
		"or the Kustomize base; every file's sha256 is in checksums.txt.\n"
	return os.WriteFile(filepath.Join(a.dist, ChangelogMD), []byte(head+body+tail), 0o644)
}

// checksums rewrites checksums.txt with every file of dist/ but itself and the image layout
// (content-addressed already; its index digest is the .digest file): the binaries, the chart,
// the manifests, the Kustomize base, the SBOMs, install.md and the changelog.
func (a artifacts) checksums() error {
	var lines []string
	err := filepath.WalkDir(a.dist, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(a.dist, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == ImageLayout {
				return filepath.SkipDir
			}
			return nil
		}
		if rel == "checksums.txt" || !d.Type().IsRegular() {
			return nil
		}
		sum, err := fileSHA256(p)
		if err != nil {
			return err
		}
		lines = append(lines, sum+"  "+rel)
		return nil
	})
	if err != nil {
		return err
	}
	slices.SortFunc(lines, func(x, y string) int { return strings.Compare(x[66:], y[66:]) })
	return os.WriteFile(filepath.Join(a.dist, "checksums.txt"), []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}
