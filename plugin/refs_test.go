package plugin

import (
	"math/rand"
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
	"sigs.k8s.io/randfill"

	"github.com/configmap-attacher/configmap-attacher/test/support/fixtures"
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

// TestRequiredReferences: optional references and image pull secrets are not required; a
// name is required when one of its references is.
func TestRequiredReferences(t *testing.T) {
	spec := fixtures.PodSpec([]string{"vol-required"}, []string{"env-required"})
	c := &spec.Containers[0]
	c.EnvFrom = append(c.EnvFrom, corev1.EnvFromSource{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "envfrom-optional"}, Optional: optional()}})
	c.Env = append(c.Env,
		corev1.EnvVar{Name: "A", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "key-optional"}, Key: "k", Optional: optional()}}},
		// Optional here, required in the init container below: required.
		corev1.EnvVar{Name: "B", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "mixed"}, Key: "k", Optional: optional()}}})
	spec.InitContainers = []corev1.Container{{Name: "init", Env: []corev1.EnvVar{{Name: "B", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "mixed"}, Key: "k"}}}}}}
	spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "pull"}}
	spec.Volumes = append(spec.Volumes,
		corev1.Volume{Name: "p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "proj-optional"}, Optional: optional()}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "proj-required"}}}}}}},
		corev1.Volume{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "secvol-optional", Optional: optional()}}},
		corev1.Volume{Name: "csi", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "d", NodePublishSecretRef: &corev1.LocalObjectReference{Name: "csi-required"}}}})
	req := RequiredReferences(&spec)
	all := TemplateReferences(&spec)
	for _, tc := range []struct {
		o    Object
		want bool
	}{
		{Object{KindConfigMap, "vol-required"}, true},
		{Object{KindSecret, "env-required"}, true},
		{Object{KindConfigMap, "envfrom-optional"}, false},
		{Object{KindSecret, "key-optional"}, false},
		{Object{KindConfigMap, "mixed"}, true},
		{Object{KindSecret, "pull"}, false},
		{Object{KindSecret, "proj-optional"}, false},
		{Object{KindConfigMap, "proj-required"}, true},
		{Object{KindSecret, "secvol-optional"}, false},
		{Object{KindSecret, "csi-required"}, true},
	} {
		if !all.Has(tc.o) {
			t.Errorf("%s not referenced at all", tc.o)
		}
		if req.Has(tc.o) != tc.want {
			t.Errorf("%s required = %v, want %v", tc.o, req.Has(tc.o), tc.want)
		}
	}
}

func optional() *bool { t := true; return &t }

// TestKubeletWalkersMatchUpstream: visitConfigMapNames and visitSecretNames (kubelet.go) yield
// exactly what k8s.io/kubernetes' VisitPodConfigmapNames and VisitPodSecretNames yield, in the
// same order and with the same repeats (CredentialOnly counts them), on 3,000 random pod
// specs whose names come from a small set, "" included, so that specs share names and a
// volume often has more than one source set (the walkers take the first case only).
func TestKubeletWalkersMatchUpstream(t *testing.T) {
	names := []string{"", "a", "b", "c"}
	nonEmpty := 0
	for seed := int64(0); seed < 3000; seed++ {
		f := randfill.New().RandSource(rand.NewSource(seed)).NilChance(0.4).NumElements(0, 3).
			Funcs(func(s *string, c randfill.Continue) { *s = names[c.Intn(len(names))] })
		var spec corev1.PodSpec
		f.Fill(&spec)
		for _, k := range []struct {
			kind     string
			ours     func(*corev1.PodSpec, func(string))
			upstream func(*corev1.Pod, podutil.Visitor) bool
		}{{"ConfigMap", visitConfigMapNames, podutil.VisitPodConfigmapNames}, {"Secret", visitSecretNames, podutil.VisitPodSecretNames}} {
			var got, want []string
			k.ours(&spec, func(n string) { got = append(got, n) })
			k.upstream(&corev1.Pod{Spec: spec}, func(n string) bool { want = append(want, n); return true })
			if !slices.Equal(got, want) {
				t.Fatalf("seed %d, %s names: ours %q, upstream %q", seed, k.kind, got, want)
			}
			nonEmpty += len(want)
		}
	}
	if nonEmpty < 3000 {
		t.Fatalf("the random specs named only %d objects in all: the comparison saw too little", nonEmpty)
	}
}
