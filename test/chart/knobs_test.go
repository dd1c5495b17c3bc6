package chart

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// everyKnob sets every value of the chart that adds to what it renders (the scheduling and
// lifecycle knobs among them), so that one render shows each where it belongs and the
// apiserver takes them together.
const everyKnob = `
commonLabels: {team: platform}
deploymentAnnotations: {reloader.stakater.com/auto: "true"}
podAnnotations: {prometheus.io/scrape: "false"}
podLabels: {tier: control}
terminationGracePeriodSeconds: 45
priorityClassName: system-cluster-critical
nodeSelector: {kubernetes.io/os: linux}
tolerations: [{key: dedicated, operator: Equal, value: platform, effect: NoSchedule}]
topologySpreadConstraints:
  - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway}
  - {maxSkew: 2, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {tier: control}}}
extraVolumes:
  - {name: ca, configMap: {name: rel-ca}}
extraVolumeMounts:
  - {name: ca, mountPath: /etc/ssl/extra, readOnly: true}
extraEnv: [{name: SSL_CERT_DIR, value: /etc/ssl/extra}]
extraArgs: [-workers=8]
imagePullSecrets: [{name: regcred}]
serviceAccount: {annotations: {eks.amazonaws.com/role-arn: "arn:aws:iam::0:role/cma"}}
metrics: {service: {annotations: {a: b}, labels: {c: d}}}
extraObjects:
  - apiVersion: v1
    kind: ConfigMap
    metadata: {name: '{{ .Release.Name }}-ca', namespace: '{{ .Release.Namespace }}'}
    data: {ca.crt: "not a certificate"}
  - |
    apiVersion: v1
    kind: ConfigMap
    metadata:
      name: {{ include "configmap-attacher.fullname" . }}-extra
      namespace: {{ .Release.Namespace }}
    data: {release: {{ .Release.Name | quote }}}
serviceMonitor:
  enabled: true
  interval: 15s
  scrapeTimeout: 10s
  labels: {release: kube-prometheus-stack}
  relabelings: [{sourceLabels: [__meta_kubernetes_pod_node_name], targetLabel: node}]
  metricRelabelings: [{sourceLabels: [__name__], regex: go_gc_.*, action: drop}]
networkPolicy:
  enabled: true
  metricsNamespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}
  metricsPodSelector: {matchLabels: {app.kubernetes.io/name: prometheus}}
  egress:
    - ports: [{port: 6443, protocol: TCP}, {port: 443, protocol: TCP}]
prometheusRule: {enabled: true, labels: {release: kube-prometheus-stack}}
grafanaDashboard: {enabled: true, annotations: {grafana_folder: Platform}}
rbac: {job: {enabled: true, namespaces: [cma-chart-a]}}
`

// want compares got with the YAML want, naming what in the error.
func want(t *testing.T, what string, got any, wantYAML string) {
	t.Helper()
	var w any
	if err := yaml.Unmarshal([]byte(wantYAML), &w); err != nil {
		t.Fatalf("%s: bad want %q: %v", what, wantYAML, err)
	}
	if !reflect.DeepEqual(got, w) {
		g, _ := yaml.Marshal(got)
		t.Errorf("%s:\n%s\nwant:\n%s", what, g, wantYAML)
	}
}

var selectorLabels = "{app.kubernetes.io/name: configmap-attacher, app.kubernetes.io/instance: rel, app.kubernetes.io/component: controller}"

func checkEveryKnob(t *testing.T, objs []obj) {
	d := find(objs, "Deployment", releaseNS, "rel-configmap-attacher")
	if d == nil {
		t.Fatalf("no Deployment in %v", keys(objs))
	}
	pod := get(d, "spec", "template", "spec")
	ctr := get(pod, "containers", 0)
	want(t, "Deployment annotations (deploymentAnnotations)", get(d, "metadata", "annotations"), `{reloader.stakater.com/auto: "true"}`)
	if a, _ := get(d, "spec", "template", "metadata", "annotations").(map[string]any); a["reloader.stakater.com/auto"] != nil {
		t.Errorf("deploymentAnnotations leaked into the pod template: %v", a)
	}
	want(t, "pod annotations", get(d, "spec", "template", "metadata", "annotations"), `{prometheus.io/scrape: "false"}`)
	want(t, "terminationGracePeriodSeconds", get(pod, "terminationGracePeriodSeconds"), `45`)
	// The first constraint had no labelSelector: it gets the pods' selector labels; the second keeps its own.
	want(t, "topologySpreadConstraints", get(pod, "topologySpreadConstraints"), fmt.Sprintf(`
- {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway, labelSelector: {matchLabels: %s}}
- {maxSkew: 2, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {tier: control}}}`, selectorLabels))
	want(t, "volumes (extraVolumes)", get(pod, "volumes"), `[{name: ca, configMap: {name: rel-ca}}]`)
	want(t, "volumeMounts (extraVolumeMounts)", get(ctr, "volumeMounts"), `[{name: ca, mountPath: /etc/ssl/extra, readOnly: true}]`)
	want(t, "priorityClassName", get(pod, "priorityClassName"), `system-cluster-critical`)
	want(t, "tolerations", get(pod, "tolerations"), `[{key: dedicated, operator: Equal, value: platform, effect: NoSchedule}]`)
	want(t, "nodeSelector", get(pod, "nodeSelector"), `{kubernetes.io/os: linux}`)
	want(t, "imagePullSecrets", get(pod, "imagePullSecrets"), `[{name: regcred}]`)
	if args := containerArgs(t, objs); args[len(args)-1] != "-workers=8" {
		t.Errorf("args %q: extraArgs not last", args)
	}
	if env, _ := get(ctr, "env").([]any); len(env) == 0 || get(env[len(env)-1], "name") != "SSL_CERT_DIR" {
		t.Errorf("env %v: extraEnv not last", env)
	}
	for _, o := range objs {
		if n := o.meta("name"); n == "rel-ca" || n == "rel-configmap-attacher-extra" {
			continue // extraObjects carry what they say
		}
		if get(o, "metadata", "labels", "team") != "platform" {
			t.Errorf("%s lacks commonLabels team: platform", o.key())
		}
	}

	// extraObjects: a map and a string, both through tpl.
	want(t, "extraObjects[0] (a map, tpl'd)", get(find(objs, "ConfigMap", releaseNS, "rel-ca"), "data"), `{ca.crt: "not a certificate"}`)
	want(t, "extraObjects[1] (a string, tpl'd)", get(find(objs, "ConfigMap", releaseNS, "rel-configmap-attacher-extra"), "data"), `{release: rel}`)

	// ServiceMonitor relabelings.
	sm := find(objs, "ServiceMonitor", releaseNS, "rel-configmap-attacher")
	want(t, "ServiceMonitor endpoint", get(sm, "spec", "endpoints", 0), `
port: metrics
path: /metrics
interval: 15s
scrapeTimeout: 10s
honorLabels: true
relabelings: [{sourceLabels: [__meta_kubernetes_pod_node_name], targetLabel: node}]
metricRelabelings: [{sourceLabels: [__name__], regex: go_gc_.*, action: drop}]`)
	want(t, "ServiceMonitor label", get(sm, "metadata", "labels", "release"), `kube-prometheus-stack`)

	// NetworkPolicy: the release's pods; ingress only to the metrics port from the selectors
	// (one peer: both must match); egress exactly the rules given.
	np := find(objs, "NetworkPolicy", releaseNS, "rel-configmap-attacher")
	want(t, "NetworkPolicy spec", get(np, "spec"), fmt.Sprintf(`
podSelector: {matchLabels: %s}
policyTypes: [Ingress, Egress]
ingress:
  - ports: [{port: metrics, protocol: TCP}]
    from:
      - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}
        podSelector: {matchLabels: {app.kubernetes.io/name: prometheus}}
      - podSelector: {matchLabels: {app.kubernetes.io/name: configmap-attacher, app.kubernetes.io/instance: rel, app.kubernetes.io/component: test}}
egress:
  - ports: [{port: 6443, protocol: TCP}, {port: 443, protocol: TCP}]`, selectorLabels))
	if ports, _ := get(get(d, "spec", "template", "spec", "containers", 0), "ports").([]any); len(ports) == 0 || get(ports[0], "name") != "metrics" {
		t.Errorf("container ports %v: the NetworkPolicy's named port metrics is not the container's", ports)
	}

	checkAlertSelectors(t, find(objs, "PrometheusRule", releaseNS, "rel-configmap-attacher"), `{job="rel-configmap-attacher-metrics"}`)
	want(t, "dashboard annotations", get(find(objs, "ConfigMap", releaseNS, "rel-configmap-attacher-dashboard"), "metadata", "annotations"), `{grafana_folder: Platform}`)
	if js, _ := get(find(objs, "ConfigMap", releaseNS, "rel-configmap-attacher-dashboard"), "data", "configmap-attacher.json").(string); !strings.Contains(js, `job=~\"$job\"`) {
		t.Errorf("the dashboard ConfigMap's JSON does not select the job variable")
	}
}

// TestNetworkPolicyDefaults: without selectors the NetworkPolicy admits any pod of any
// namespace to the metrics port (never the world outside the cluster) and leaves egress open;
// off, it is not rendered.
func TestNetworkPolicyDefaults(t *testing.T) {
	objs, _, err := render(t, "networkPolicy: {enabled: true}\n")
	if err != nil {
		t.Fatal(err)
	}
	want(t, "NetworkPolicy spec", get(find(objs, "NetworkPolicy", releaseNS, "rel-configmap-attacher"), "spec"), fmt.Sprintf(`
podSelector: {matchLabels: %s}
policyTypes: [Ingress]
ingress:
  - ports: [{port: metrics, protocol: TCP}]
    from: [{namespaceSelector: {}}]`, selectorLabels))
	objs, _, err = render(t, "networkPolicy: {enabled: true, metricsPodSelector: {matchLabels: {app: prom}}}\n")
	if err != nil {
		t.Fatal(err)
	}
	// The second peer: the helm test Pod, which checks the metrics endpoint too.
	want(t, "NetworkPolicy from (pod selector alone: the release namespace's pods)",
		get(find(objs, "NetworkPolicy", releaseNS, "rel-configmap-attacher"), "spec", "ingress", 0, "from"),
		`[{podSelector: {matchLabels: {app: prom}}}, {podSelector: {matchLabels: {app.kubernetes.io/name: configmap-attacher, app.kubernetes.io/instance: rel, app.kubernetes.io/component: test}}}]`)
	objs, _, err = render(t, "networkPolicy: {enabled: true, metricsPodSelector: {matchLabels: {app: prom}}}\ntests: {doctor: {enabled: false}}\n")
	if err != nil {
		t.Fatal(err)
	}
	want(t, "NetworkPolicy from without the helm test",
		get(find(objs, "NetworkPolicy", releaseNS, "rel-configmap-attacher"), "spec", "ingress", 0, "from"), `[{podSelector: {matchLabels: {app: prom}}}]`)
	objs, _, err = render(t, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.kind() == "NetworkPolicy" || o.kind() == "PodMonitor" {
			t.Errorf("%s rendered by default", o.key())
		}
	}
}
