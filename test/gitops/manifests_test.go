package gitops

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"text/template"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// The Git side: each revision of an app is a directory of manifests, as a user's repository
// holds them. Every revision is a real change (new content-hashed ConfigMap and Secret names
// in the pod template), so Argo CD sees the app OutOfSync and auto-sync fires.

// workload is one Rollout or Deployment of an app, with its own revisioned ConfigMap and Secret.
type workload struct {
	Kind string // "Rollout" (canary) or "Deployment"
	Name string
	// Step is the configmap-attacher step, first in the canary: "" none, "list" (the revision's
	// names, as examples/rollout.yaml), "discover" (discover: {} and the names).
	Step string
	// BlueGreen makes the Rollout blueGreen (no steps) instead of canary.
	BlueGreen bool
}

// appSpec is an app's manifests.
type appSpec struct {
	Workloads []workload
	// ConfigAnnotations go on every revisioned ConfigMap and Secret (e.g. Prune=false).
	ConfigAnnotations map[string]string
	// Job adds examples/job.yaml (its ServiceAccount, Role, RoleBinding and Sync-hook Job, the
	// names and -expect-template-annotation value replaced per revision) for the first workload.
	Job bool
}

// configNames are the content-hashed names of workload wl's ConfigMap and Secret at revision n.
func configNames(wl string, n int) (cm, secret string) {
	h := sha256.Sum256([]byte(configData(wl, n)))
	s := hex.EncodeToString(h[:])
	return wl + "-config-" + s[:5], wl + "-secret-" + s[5:10]
}

func configData(wl string, n int) string { return fmt.Sprintf("%s revision %d", wl, n) }

var manifestTemplate = template.Must(template.New("m").Funcs(template.FuncMap{"quote": strconv.Quote}).Parse(`apiVersion: v1
kind: ConfigMap
metadata:
  name: {{.CM}}
  labels:
    configmap-attacher/revisioned: "true"
    app: {{.W.Name}}
    example.com/revision: "{{.N}}"
{{- if .Annotations}}
  annotations:
{{- range $k, $v := .Annotations}}
    {{$k}}: {{quote $v}}
{{- end}}
{{- end}}
data:
  app.conf: {{quote .Data}}
---
apiVersion: v1
kind: Secret
metadata:
  name: {{.Secret}}
  labels:
    configmap-attacher/revisioned: "true"
    app: {{.W.Name}}
    example.com/revision: "{{.N}}"
{{- if .Annotations}}
  annotations:
{{- range $k, $v := .Annotations}}
    {{$k}}: {{quote $v}}
{{- end}}
{{- end}}
type: Opaque
stringData:
  API_TOKEN: {{quote .Data}}
---
{{- if eq .W.Kind "Rollout"}}
apiVersion: argoproj.io/v1alpha1
kind: Rollout
{{- else}}
apiVersion: apps/v1
kind: Deployment
{{- end}}
metadata:
  name: {{.W.Name}}
spec:
  replicas: 2
  # One old ReplicaSet is kept: revision N-2's leaves the history at revision N, and the
  # garbage collector deletes the config it owns with it.
  revisionHistoryLimit: 1
  selector:
    matchLabels:
      app: {{.W.Name}}
  template:
    metadata:
      labels:
        app: {{.W.Name}}
      annotations:
        example.com/release: "{{.N}}"
    spec:
      terminationGracePeriodSeconds: 0
      containers:
        - name: app
          image: nginx:1.27
          envFrom:
            - secretRef:
                name: {{.Secret}}
          volumeMounts:
            - name: config
              mountPath: /etc/app
      volumes:
        - name: config
          configMap:
            name: {{.CM}}
{{- if eq .W.Kind "Rollout"}}
  strategy:
{{- if .W.BlueGreen}}
    blueGreen:
      activeService: {{.W.Name}}
      autoPromotionEnabled: false
{{- else}}
    canary:
      steps:
{{- if .W.Step}}
        - plugin:
            name: configmap-attacher/configmap-attacher
            config:
              configMaps: [{{.CM}}]
              secrets: [{{.Secret}}]
{{- if eq .W.Step "discover"}}
              discover: {}
{{- end}}
{{- end}}
        - setWeight: 50
        - pause: {}
{{- end}}
{{- else}}
  strategy:
    type: RollingUpdate
    rollingUpdate: {maxSurge: 1, maxUnavailable: 0}
{{- end}}
{{- if .W.BlueGreen}}
---
apiVersion: v1
kind: Service
metadata:
  name: {{.W.Name}}
spec:
  selector:
    app: {{.W.Name}}
  ports:
    - port: 80
      targetPort: 8080
{{- end}}
`))

// files renders revision n of the app: one file per workload, plus job.yaml with Job.
func (s appSpec) files(t testing.TB, n int) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, w := range s.Workloads {
		cm, sec := configNames(w.Name, n)
		var b bytes.Buffer
		err := manifestTemplate.Execute(&b, map[string]any{"W": w, "N": n, "CM": cm, "Secret": sec, "Data": configData(w.Name, n),
			"Annotations": s.ConfigAnnotations})
		if err != nil {
			t.Fatal(err)
		}
		out[w.Name+".yaml"] = b.String()
	}
	if s.Job {
		out["job.yaml"] = jobManifest(t, s.Workloads[0].Name, n)
	}
	return out
}

// jobManifest is examples/job.yaml for workload wl at revision n: the Rollout name, the
// revision's ConfigMap and Secret and the -expect-template-annotation value replaced, every
// other setting (hook annotations, RBAC, args) as the example has it.
func jobManifest(t testing.TB, wl string, n int) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cluster.RepoRoot(), "examples", "job.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cm, sec := configNames(wl, n)
	s := string(b)
	for _, r := range [][2]string{
		{"name: configmap-attacher-web", "name: configmap-attacher-" + wl},
		{"- web\n", "- " + wl + "\n"},
		{"web-config-7f9c2", cm},
		{"web-secret-b41d0", sec},
		{"example.com/release=1", "example.com/release=" + strconv.Itoa(n)},
	} {
		if !strings.Contains(s, r[0]) {
			t.Fatalf("examples/job.yaml no longer contains %q: update jobManifest", r[0])
		}
		s = strings.ReplaceAll(s, r[0], r[1])
	}
	return s
}
