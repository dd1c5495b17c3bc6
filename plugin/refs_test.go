package plugin

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestTemplateReferences covers every place a pod template can name a ConfigMap or Secret.
func TestTemplateReferences(t *testing.T) {
	lor := func(n string) corev1.LocalObjectReference { return corev1.LocalObjectReference{Name: n} }
	spec := corev1.PodSpec{
		ImagePullSecrets: []corev1.LocalObjectReference{lor("sec-pull")},
		InitContainers: []corev1.Container{{Name: "init", EnvFrom: []corev1.EnvFromSource{
			{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: lor("cm-init-envfrom")}},
		}}},
		Containers: []corev1.Container{{Name: "app",
			EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: lor("sec-envfrom")}}},
			Env: []corev1.EnvVar{
				{Name: "A", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: lor("cm-env"), Key: "a"}}},
				{Name: "B", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: lor("sec-env"), Key: "b"}}},
				{Name: "C", Value: "plain"},
			},
		}},
		EphemeralContainers: []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug",
			EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: lor("cm-ephemeral")}}}}}},
		Volumes: []corev1.Volume{
			{Name: "v1", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: lor("cm-volume")}}},
			{Name: "v2", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "sec-volume"}}},
			{Name: "v3", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: lor("cm-projected")}},
				{Secret: &corev1.SecretProjection{LocalObjectReference: lor("sec-projected")}},
			}}}},
			{Name: "v4", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "d", NodePublishSecretRef: &corev1.LocalObjectReference{Name: "sec-csi"}}}},
			{Name: "v5", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		},
	}
	refs := TemplateReferences(&spec)
	wantCM := map[string]bool{"cm-init-envfrom": true, "cm-env": true, "cm-ephemeral": true, "cm-volume": true, "cm-projected": true}
	wantSec := map[string]bool{"sec-pull": true, "sec-envfrom": true, "sec-env": true, "sec-volume": true, "sec-projected": true, "sec-csi": true}
	if !reflect.DeepEqual(refs.ConfigMaps, wantCM) {
		t.Errorf("ConfigMaps = %v, want %v", refs.ConfigMaps, wantCM)
	}
	if !reflect.DeepEqual(refs.Secrets, wantSec) {
		t.Errorf("Secrets = %v, want %v", refs.Secrets, wantSec)
	}
	if !refs.Has(Object{KindSecret, "sec-csi"}) || refs.Has(Object{KindConfigMap, "sec-csi"}) {
		t.Error("Has must look at the object's kind")
	}
	if got := TemplateReferences(nil); len(got.ConfigMaps)+len(got.Secrets) != 0 {
		t.Errorf("nil spec: %v", got)
	}
}
