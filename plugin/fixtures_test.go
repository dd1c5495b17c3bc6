package plugin

import (
	"github.com/configmap-attacher/configmap-attacher/test/fakemeta"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

const testNS = "shop"

var rolloutUID = types.UID("11111111-2222-3333-4444-555555555555")

func testRollout(hash string) *v1alpha1.Rollout {
	return &v1alpha1.Rollout{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: testNS, UID: rolloutUID, Generation: 3},
		Spec: v1alpha1.RolloutSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
		},
		Status: v1alpha1.RolloutStatus{CurrentPodHash: hash, ObservedGeneration: "3"},
	}
}

// podSpec mounts the ConfigMaps as volumes and takes the Secrets through envFrom.
func podSpec(configMaps, secrets []string) corev1.PodSpec {
	c := corev1.Container{Name: "app", Image: "nginx"}
	var vols []corev1.Volume
	for _, cm := range configMaps {
		vols = append(vols, corev1.Volume{Name: cm, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm}}}})
	}
	for _, s := range secrets {
		c.EnvFrom = append(c.EnvFrom, corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: s}}})
	}
	return corev1.PodSpec{Containers: []corev1.Container{c}, Volumes: vols}
}

func testRS(hash string, uid types.UID, owner types.UID, spec corev1.PodSpec) *appsv1.ReplicaSet {
	t := true
	return &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{
			Name: "web-" + hash, Namespace: testNS, UID: uid,
			Labels:          map[string]string{"app": "web", PodTemplateHashLabel: hash},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "argoproj.io/v1alpha1", Kind: "Rollout", Name: "web", UID: owner, Controller: &t}},
		},
		Spec: appsv1.ReplicaSetSpec{Template: corev1.PodTemplateSpec{Spec: spec}},
	}
}

func testCM(name string, owners ...metav1.OwnerReference) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS, OwnerReferences: owners, Labels: map[string]string{"team": "shop"}, Annotations: map[string]string{"note": "keep"}},
		Data: map[string]string{"app.yaml": "color: blue"}}
}

func testSecret(name string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS}, Data: map[string][]byte{"token": []byte("s3cr3t")}}
}

// clientsOf serves both clients from one typed fake.
func clientsOf(c kubernetes.Interface) Clients { return Clients{Kube: c, Meta: fakemeta.New(c)} }
