package plugin

import (
	"iter"

	corev1 "k8s.io/api/core/v1"
)

// The kubelet's walkers of the ConfigMaps and Secrets a pod spec uses: VisitPodConfigmapNames,
// VisitPodSecretNames and ContainerIter of k8s.io/kubernetes/pkg/api/v1/pod (Kubernetes
// v1.34, Apache License 2.0), copied because that package links the kubelet's feature gates
// and Prometheus (~3.5 MiB resident) into the step plugin. TestKubeletWalkersMatchUpstream
// compares them with the upstream functions on random pod specs, so an upstream change fails
// the test on the next dependency update.

// allContainers yields the init, regular and ephemeral containers, in that order.
func allContainers(spec *corev1.PodSpec) iter.Seq[*corev1.Container] {
	return func(yield func(*corev1.Container) bool) {
		for i := range spec.InitContainers {
			if !yield(&spec.InitContainers[i]) {
				return
			}
		}
		for i := range spec.Containers {
			if !yield(&spec.Containers[i]) {
				return
			}
		}
		for i := range spec.EphemeralContainers {
			if !yield((*corev1.Container)(&spec.EphemeralContainers[i].EphemeralContainerCommon)) {
				return
			}
		}
	}
}

// visitConfigMapNames calls visit for each ConfigMap name the spec uses (empty names skipped,
// repeats not), as VisitPodConfigmapNames.
func visitConfigMapNames(spec *corev1.PodSpec, visit func(string)) {
	v := func(n string) {
		if n != "" {
			visit(n)
		}
	}
	for c := range allContainers(spec) {
		for _, ef := range c.EnvFrom {
			if ef.ConfigMapRef != nil {
				v(ef.ConfigMapRef.Name)
			}
		}
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
				v(e.ValueFrom.ConfigMapKeyRef.Name)
			}
		}
	}
	for i := range spec.Volumes {
		s := &spec.Volumes[i].VolumeSource
		switch {
		case s.Projected != nil:
			for _, p := range s.Projected.Sources {
				if p.ConfigMap != nil {
					v(p.ConfigMap.Name)
				}
			}
		case s.ConfigMap != nil:
			v(s.ConfigMap.Name)
		}
	}
}

// visitSecretNames calls visit for each Secret name the spec uses (empty names skipped,
// repeats not), as VisitPodSecretNames: image pull secrets, containers, then volumes (one
// source per volume, in the kubelet's order of cases).
func visitSecretNames(spec *corev1.PodSpec, visit func(string)) {
	v := func(n string) {
		if n != "" {
			visit(n)
		}
	}
	ref := func(r *corev1.LocalObjectReference) {
		if r != nil {
			v(r.Name)
		}
	}
	for _, ps := range spec.ImagePullSecrets {
		v(ps.Name)
	}
	for c := range allContainers(spec) {
		for _, ef := range c.EnvFrom {
			if ef.SecretRef != nil {
				v(ef.SecretRef.Name)
			}
		}
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				v(e.ValueFrom.SecretKeyRef.Name)
			}
		}
	}
	for i := range spec.Volumes {
		s := &spec.Volumes[i].VolumeSource
		switch {
		case s.AzureFile != nil:
			v(s.AzureFile.SecretName)
		case s.CephFS != nil:
			ref(s.CephFS.SecretRef)
		case s.Cinder != nil:
			ref(s.Cinder.SecretRef)
		case s.FlexVolume != nil:
			ref(s.FlexVolume.SecretRef)
		case s.Projected != nil:
			for _, p := range s.Projected.Sources {
				if p.Secret != nil {
					v(p.Secret.Name)
				}
			}
		case s.RBD != nil:
			ref(s.RBD.SecretRef)
		case s.Secret != nil:
			v(s.Secret.SecretName)
		case s.ScaleIO != nil:
			ref(s.ScaleIO.SecretRef)
		case s.ISCSI != nil:
			ref(s.ISCSI.SecretRef)
		case s.StorageOS != nil:
			if s.StorageOS.SecretRef != nil {
				v(s.StorageOS.SecretRef.Name)
			}
		case s.CSI != nil:
			ref(s.CSI.NodePublishSecretRef)
		}
	}
}
