// Package notes is the release's install.md: what a platform engineer pastes to install the
// plugin (the argo-rollouts-config entries with the step binary's sha256 per architecture, the
// argo-helm values with the initContainer, the image by digest). hack/release fills it from
// dist/; test/chart admits its initContainer under Pod Security's restricted level.
package notes

import (
	"io"
	"text/template"
)

// Release is what install.md is rendered from.
type Release struct {
	Version     string
	Image       string // repository, e.g. ghcr.io/configmap-attacher/configmap-attacher
	Digest      string // the index's digest, sha256:…
	DownloadURL string // base URL of the release's assets, ending in /
	Platforms   string // the image's platforms, e.g. "linux/amd64 and linux/arm64"
	Assets      []Asset
}

// Asset is one linux step-plugin binary of the release (what the controller downloads).
type Asset struct {
	Arch, Name, SHA256 string
}

// Render writes install.md.
func Render(w io.Writer, r Release) error {
	return tmpl.Execute(w, r)
}

var tmpl = template.Must(template.New("install.md").Parse(`# configmap-attacher {{.Version}}: install

Image (one multi-arch index, {{.Platforms}}; the Job, the controller and the plugin
installer): ` + "`{{.Image}}@{{.Digest}}`" + ` (tag ` + "`{{.Image}}:{{.Version}}`" + `).

Step plugins need Argo Rollouts ≥ 1.8; tested with v1.10.2 and v1.9.1. Full instructions,
RBAC and verification: docs/install.md.

## 1. From the image (any architecture, no egress)

An initContainer of the Argo Rollouts controller copies the plugin out of the image into an
emptyDir with ` + "`install-plugin`" + `; every node pulls its own architecture from the index, so this is
the way for clusters with **mixed architectures**. With the argo-helm ` + "`argo-rollouts`" + ` chart
(≥ 2.39.1 for ` + "`controller.stepPlugins`" + `; since 2.39.4 ` + "`helm upgrade`" + ` restarts the controller when
the ConfigMap changes):

` + "```yaml" + `
controller:
  image:
    tag: v1.9.1   # chart 2.41.0 installs v1.9.0 with v1.9 CRDs; for v1.10.2 install its CRDs and set installCRDs: false
  stepPlugins:
    - name: configmap-attacher/configmap-attacher
      location: file:///home/argo-rollouts/plugins/configmap-attacher
      # Owner references only on objects labelled configmap-attacher/revisioned=true.
      args: ["--require-opt-in", "--opt-in-selector", "configmap-attacher/revisioned=true"]
  initContainers:
    - name: install-configmap-attacher
      image: {{.Image}}@{{.Digest}}
      args: ["install-plugin", "/plugins"]
      securityContext:
        runAsNonRoot: true
        seccompProfile: {type: RuntimeDefault}
        allowPrivilegeEscalation: false
        readOnlyRootFilesystem: true
        capabilities: {drop: ["ALL"]}
      volumeMounts:
        - {name: configmap-attacher-plugin, mountPath: /plugins}
  volumes:
    - {name: configmap-attacher-plugin, emptyDir: {}}
  volumeMounts:
    - {name: configmap-attacher-plugin, mountPath: /home/argo-rollouts/plugins, readOnly: true}
providerRBAC:
  enabled: true   # additionalRules are rendered only when true
  additionalRules:
    - apiGroups: [""]
      resources: ["configmaps", "secrets"]
      verbs: ["patch"]
    - apiGroups: ["apps"]
      resources: ["statefulsets", "daemonsets"]
      verbs: ["list"]
    - apiGroups: ["batch"]
      resources: ["cronjobs"]
      verbs: ["list"]
` + "```" + `

Keep ` + "`controller.createConfigmap`" + ` and ` + "`controller.createClusterRole`" + ` true: false silently drops
these settings.

## 2. Downloaded by the controller (one architecture)

The controller downloads the binary at every start and refuses to start on a sha256 mismatch.
The binary is per architecture: a cluster whose controller may be scheduled on nodes of
**mixed architectures** must use the image (1.) instead, which picks the right binary.
Add the entry for your nodes' architecture, then restart the controller: in the
` + "`argo-rollouts-config`" + ` ConfigMap its ` + "`stepPlugins`" + ` key is a string holding a YAML list; with the
argo-helm chart ` + "`controller.stepPlugins`" + ` is the list itself.
{{range .Assets}}
linux/{{.Arch}}, the ` + "`argo-rollouts-config`" + ` ConfigMap's data:

` + "```yaml" + `
stepPlugins: |-
  - name: configmap-attacher/configmap-attacher
    location: {{$.DownloadURL}}{{.Name}}
    sha256: "{{.SHA256}}"
    args: ["--require-opt-in", "--opt-in-selector", "configmap-attacher/revisioned=true"]
` + "```" + `

linux/{{.Arch}}, the argo-helm chart's values:

` + "```yaml" + `
controller:
  stepPlugins:
    - name: configmap-attacher/configmap-attacher
      location: {{$.DownloadURL}}{{.Name}}
      sha256: "{{.SHA256}}"
      args: ["--require-opt-in", "--opt-in-selector", "configmap-attacher/revisioned=true"]
` + "```" + `
{{end}}
## Checksums

| asset | sha256 |
|---|---|
{{range .Assets}}| ` + "`{{.Name}}`" + ` | ` + "`{{.SHA256}}`" + ` |
{{end}}| image index ` + "`{{.Image}}:{{.Version}}`" + ` | ` + "`{{.Digest}}`" + ` |

All assets: checksums.txt. The controller logs ` + "`Downloading plugin configmap-attacher/configmap-attacher from: …`" + `
and ` + "`Download complete`" + ` (or ` + "`Copied plugin from …`" + ` for the image install), then the plugin's
` + "`configmap-attacher step plugin initialised`" + ` line on the first step.
`))
