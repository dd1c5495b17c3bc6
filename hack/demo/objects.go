package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// revision is one version of the app's configuration: a ConfigMap and a Secret whose names
// carry a hash of their content (as Kustomize's configMapGenerator or a Helm template makes).
type revision struct {
	n                  int
	cm, secret         string
	cmData, secretData map[string]string
	rs                 *appsv1.ReplicaSet // once the controller has created it
}

func newRevision(n int) *revision {
	colors := []string{"blue", "green", "orange", "purple", "teal"}
	r := &revision{n: n,
		cmData:     map[string]string{"app.properties": fmt.Sprintf("color=%s\nlog.level=info\nfeature.checkout=%v\n", colors[(n-1)%len(colors)], n >= 3)},
		secretData: map[string]string{"API_TOKEN": fmt.Sprintf("demo-token-%d", n*7919)},
	}
	r.cm = appName + "-config-" + contentHash(r.cmData)
	r.secret = appName + "-secret-" + contentHash(r.secretData)
	return r
}

// contentHash is the first 5 hex digits of a SHA-256 over the sorted data.
func contentHash(data map[string]string) string {
	h := sha256.New()
	for _, k := range sortedKeys(data) {
		fmt.Fprintf(h, "%s=%s\x00", k, data[k])
	}
	return hex.EncodeToString(h.Sum(nil))[:5]
}

func (r *revision) objects() []cluster.ConfigRef {
	return []cluster.ConfigRef{{Kind: "ConfigMap", Name: r.cm}, {Kind: "Secret", Name: r.secret}}
}

func (r *revision) template() corev1.PodTemplateSpec {
	no := false
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{cluster.LabelApp: appName}},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: &no,
			Containers: []corev1.Container{{
				Name: "web", Image: "nginx:1.27",
				EnvFrom:      []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: r.secret}}}},
				VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/web", ReadOnly: true}},
			}},
			Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{
				ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: r.cm}}}}},
		},
	}
}

// steps: the plugin step first (naming this revision's objects), setWeight 50, pause {}.
func (r *revision) steps() []v1alpha1.CanaryStep {
	cfg, _ := json.Marshal(map[string]any{"configMaps": []string{r.cm}, "secrets": []string{r.secret}})
	w := int32(50)
	return []v1alpha1.CanaryStep{
		{Plugin: &v1alpha1.PluginStep{Name: cluster.PluginName, Config: cfg}},
		{SetWeight: &w},
		{Pause: &v1alpha1.RolloutPause{}},
	}
}

// rollout is the app's Rollout at revision r: canary, the plugin step first (steps).
func (r *revision) rollout() *v1alpha1.Rollout {
	lim, n := historyLimit, replicas
	return &v1alpha1.Rollout{
		ObjectMeta: metav1.ObjectMeta{Name: appName, Namespace: namespace},
		Spec: v1alpha1.RolloutSpec{
			Replicas: &n, RevisionHistoryLimit: &lim,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{cluster.LabelApp: appName}},
			Template: r.template(),
			Strategy: v1alpha1.RolloutStrategy{Canary: &v1alpha1.CanaryStrategy{Steps: r.steps()}},
		},
	}
}
