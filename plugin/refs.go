package plugin

import (
	corev1 "k8s.io/api/core/v1"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
)

// Kind is the kind of object the plugin attaches.
type Kind string

const (
	// KindConfigMap is a core/v1 ConfigMap.
	KindConfigMap Kind = "ConfigMap"
	// KindSecret is a core/v1 Secret.
	KindSecret Kind = "Secret"
)

// Object names one ConfigMap or Secret in the Rollout's namespace.
type Object struct {
	Kind Kind
	Name string
}

func (o Object) String() string { return string(o.Kind) + " " + o.Name }

// References is the set of ConfigMaps and Secrets a pod template uses.
type References struct {
	ConfigMaps map[string]bool
	Secrets    map[string]bool
}

// Has reports whether the template references o.
func (r References) Has(o Object) bool {
	if o.Kind == KindSecret {
		return r.Secrets[o.Name]
	}
	return r.ConfigMaps[o.Name]
}

// TemplateReferences returns every ConfigMap and Secret the pod spec references, using the
// walkers the kubelet and the NodeRestriction admission plugin use (volumes incl. projected,
// env valueFrom, envFrom, init and ephemeral containers, image pull secrets, secret refs of
// CSI and other volume sources), so our idea of "used" is exactly Kubernetes' own.
func TemplateReferences(spec *corev1.PodSpec) References {
	refs := References{ConfigMaps: map[string]bool{}, Secrets: map[string]bool{}}
	if spec == nil {
		return refs
	}
	pod := &corev1.Pod{Spec: *spec}
	podutil.VisitPodConfigmapNames(pod, func(name string) bool {
		refs.ConfigMaps[name] = true
		return true
	})
	podutil.VisitPodSecretNames(pod, func(name string) bool {
		refs.Secrets[name] = true
		return true
	})
	return refs
}

// CredentialOnly returns the Secrets the pod spec uses only as credentials: image pull
// secrets and the secretRef fields of volume sources (CSI nodePublishSecretRef, cephfs, rbd,
// flexVolume, …). Such Secrets are shared by nature, so an explicit list does not make them
// dependents unless they carry the opt-in label. Every other use the kubelet's walker counts
// (secret volumes, projected secrets, envFrom, env secretKeyRef) is content.
func CredentialOnly(spec *corev1.PodSpec) References {
	out := References{ConfigMaps: map[string]bool{}, Secrets: map[string]bool{}}
	if spec == nil {
		return out
	}
	all := TemplateReferences(spec)
	content := map[string]bool{}
	for _, v := range spec.Volumes {
		switch {
		case v.Secret != nil:
			content[v.Secret.SecretName] = true
		case v.Projected != nil:
			for _, s := range v.Projected.Sources {
				if s.Secret != nil {
					content[s.Secret.Name] = true
				}
			}
		}
	}
	for c := range podutil.ContainerIter(spec, podutil.AllContainers) {
		for _, ef := range c.EnvFrom {
			if ef.SecretRef != nil {
				content[ef.SecretRef.Name] = true
			}
		}
		for _, ev := range c.Env {
			if ev.ValueFrom != nil && ev.ValueFrom.SecretKeyRef != nil {
				content[ev.ValueFrom.SecretKeyRef.Name] = true
			}
		}
	}
	for name := range all.Secrets {
		if !content[name] {
			out.Secrets[name] = true
		}
	}
	return out
}

// GapReplicaSet is what Gaps needs of one ReplicaSet of a watched or audited workload.
type GapReplicaSet struct {
	Live bool
	// Refs are the objects its pod template references, Required those its pods cannot start
	// without (RequiredReferences).
	Refs, Required []Object
}

// GapObject is an object's state as Gaps needs it.
type GapObject struct {
	Exists, OptedIn, ReplicaSetOwned bool
}

// Gaps counts one namespace's two continuous-audit figures, for audit's summary and the
// controller mode's gauges alike: unowned, the distinct opted-in objects that a live
// ReplicaSet references and that no ReplicaSet owns (never collected; a prune deletes them);
// and lost, the references from a live ReplicaSet to a required object that does not exist
// (each is a revision whose pods, or a rollback to it, would fail).
func Gaps(rss []GapReplicaSet, lookup func(Object) GapObject) (unowned, lost int) {
	seen := map[Object]bool{}
	for _, rs := range rss {
		if !rs.Live {
			continue
		}
		for _, o := range rs.Refs {
			if seen[o] {
				continue
			}
			seen[o] = true
			if g := lookup(o); g.Exists && g.OptedIn && !g.ReplicaSetOwned {
				unowned++
			}
		}
		for _, o := range rs.Required {
			if !lookup(o).Exists {
				lost++
			}
		}
	}
	return unowned, lost
}

// ObjectsOf flattens references, sorted (ConfigMaps first).
func ObjectsOf(r References) []Object {
	out := make([]Object, 0, len(r.ConfigMaps)+len(r.Secrets))
	for n := range r.ConfigMaps {
		out = append(out, Object{KindConfigMap, n})
	}
	for n := range r.Secrets {
		out = append(out, Object{KindSecret, n})
	}
	sortObjects(out)
	return out
}
