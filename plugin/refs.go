package plugin

import (
	"cmp"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Which ConfigMaps and Secrets a pod template uses.

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

// CompareObjects orders objects by kind (ConfigMaps first), then name: the one order of every
// list a message, a report or a patch plan shows.
func CompareObjects(x, y Object) int {
	if c := cmp.Compare(x.Kind, y.Kind); c != 0 {
		return c
	}
	return cmp.Compare(x.Name, y.Name)
}

func sortObjects(objs []Object) { slices.SortFunc(objs, CompareObjects) }

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
	visitConfigMapNames(spec, func(name string) { refs.ConfigMaps[name] = true })
	visitSecretNames(spec, func(name string) { refs.Secrets[name] = true })
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
	visitContent(spec, func(o Object, _ bool) {
		if o.Kind == KindSecret {
			content[o.Name] = true
		}
	})
	for name := range all.Secrets {
		if !content[name] {
			out.Secrets[name] = true
		}
	}
	return out
}

// RequiredReferences is TemplateReferences without the references a pod starts without:
// optional ones (optional: true on a volume, a projected source, envFrom or a key ref) and
// image pull secrets (the kubelet warns and pulls anyway). A name counts as required when
// at least one of its references is. The occurrences are counted with the kubelet's walkers,
// so a reference kind they know and this function does not is treated as required.
func RequiredReferences(spec *corev1.PodSpec) References {
	req := References{ConfigMaps: map[string]bool{}, Secrets: map[string]bool{}}
	if spec == nil {
		return req
	}
	total := map[Object]int{}
	visitConfigMapNames(spec, func(n string) { total[Object{KindConfigMap, n}]++ })
	visitSecretNames(spec, func(n string) { total[Object{KindSecret, n}]++ })
	optional := map[Object]int{}
	for _, ps := range spec.ImagePullSecrets {
		if ps.Name != "" {
			optional[Object{KindSecret, ps.Name}]++
		}
	}
	visitContent(spec, func(o Object, opt bool) {
		if o.Name != "" && opt {
			optional[o]++
		}
	})
	for o, n := range total {
		if n > optional[o] {
			if o.Kind == KindSecret {
				req.Secrets[o.Name] = true
			} else {
				req.ConfigMaps[o.Name] = true
			}
		}
	}
	return req
}

// visitContent is the one walker of the references that bring an object's data into the pod
// — envFrom, env key refs (every container kind), configMap and secret volumes and projected
// sources — with each one's optional flag. The kubelet's walkers count these and, besides,
// the credentials (image pull secrets, volume sources' secretRefs), which have no optional
// flag. One source per volume, projected first, as in the kubelet's walkers.
func visitContent(spec *corev1.PodSpec, visit func(o Object, optional bool)) {
	ref := func(k Kind, name string, opt *bool) { visit(Object{k, name}, opt != nil && *opt) }
	for c := range allContainers(spec) {
		for _, ef := range c.EnvFrom {
			if ef.ConfigMapRef != nil {
				ref(KindConfigMap, ef.ConfigMapRef.Name, ef.ConfigMapRef.Optional)
			}
			if ef.SecretRef != nil {
				ref(KindSecret, ef.SecretRef.Name, ef.SecretRef.Optional)
			}
		}
		for _, ev := range c.Env {
			if ev.ValueFrom == nil {
				continue
			}
			if r := ev.ValueFrom.ConfigMapKeyRef; r != nil {
				ref(KindConfigMap, r.Name, r.Optional)
			}
			if r := ev.ValueFrom.SecretKeyRef; r != nil {
				ref(KindSecret, r.Name, r.Optional)
			}
		}
	}
	for _, v := range spec.Volumes {
		switch src := v.VolumeSource; {
		case src.Projected != nil:
			for _, s := range src.Projected.Sources {
				if s.ConfigMap != nil {
					ref(KindConfigMap, s.ConfigMap.Name, s.ConfigMap.Optional)
				}
				if s.Secret != nil {
					ref(KindSecret, s.Secret.Name, s.Secret.Optional)
				}
			}
		case src.ConfigMap != nil:
			ref(KindConfigMap, src.ConfigMap.Name, src.ConfigMap.Optional)
		case src.Secret != nil:
			ref(KindSecret, src.Secret.SecretName, src.Secret.Optional)
		}
	}
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

// Resource is the API resource of a kind (core/v1 configmaps or secrets), as the metadata
// client addresses it.
func (k Kind) Resource() schema.GroupVersionResource {
	if k == KindSecret {
		return corev1.SchemeGroupVersion.WithResource("secrets")
	}
	return corev1.SchemeGroupVersion.WithResource("configmaps")
}
