package controller

import (
	"maps"
	"slices"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configmap-attacher/configmap-attacher/plugin"
)

// What the caches keep: compact records of ReplicaSets (cachedReplicaSet) and of ConfigMaps,
// Secrets and workloads (cachedObject), made by the informers' transforms (informers.go,
// users.go), and the interner that shares the strings they repeat.

// cachedReplicaSet is what the ReplicaSet cache keeps of a ReplicaSet (see compactReplicaSet):
// ObjectMeta with name, namespace, UID, resourceVersion, generation, creation and deletion
// timestamps and only the controller reference, plus the template's references.
type cachedReplicaSet struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	// Refs are the ConfigMaps and Secrets the pod template references (plugin.TemplateReferences);
	// Required those its pods cannot start without (plugin.RequiredReferences); Creds those it
	// uses only as credentials (plugin.CredentialOnly).
	Refs, Required, Creds []plugin.Object
}

func (r *cachedReplicaSet) credentialOnly(o plugin.Object) bool {
	return slices.Contains(r.Creds, o)
}

// sortCached orders cached ReplicaSets as plugin.SortReplicaSets does.
func sortCached(crs []*cachedReplicaSet) {
	slices.SortFunc(crs, func(x, y *cachedReplicaSet) int { return plugin.OlderFirst(x, y) })
}

// DeepCopyObject is required by runtime.Object; the cache never modifies its objects.
func (r *cachedReplicaSet) DeepCopyObject() runtime.Object {
	out := &cachedReplicaSet{TypeMeta: r.TypeMeta, Refs: append([]plugin.Object(nil), r.Refs...), Required: append([]plugin.Object(nil), r.Required...), Creds: append([]plugin.Object(nil), r.Creds...)}
	r.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return out
}

// owner is the ReplicaSet as the core takes an owner: its identity and liveness.
func (r *cachedReplicaSet) owner() plugin.Owner {
	return plugin.Owner{Name: r.Name, UID: r.UID, Deleting: r.DeletionTimestamp != nil, Controller: metav1.GetControllerOfNoCopy(r)}
}

// references is Refs as plugin.References.
func (r *cachedReplicaSet) references() plugin.References {
	out := plugin.References{ConfigMaps: map[string]bool{}, Secrets: map[string]bool{}}
	for _, o := range r.Refs {
		if o.Kind == plugin.KindSecret {
			out.Secrets[o.Name] = true
		} else {
			out.ConfigMaps[o.Name] = true
		}
	}
	return out
}

// objectList flattens references, ConfigMaps first.
func objectList(r plugin.References) []plugin.Object {
	if len(r.ConfigMaps)+len(r.Secrets) == 0 {
		return nil
	}
	out := make([]plugin.Object, 0, len(r.ConfigMaps)+len(r.Secrets))
	for n := range r.ConfigMaps {
		out = append(out, plugin.Object{Kind: plugin.KindConfigMap, Name: n})
	}
	for n := range r.Secrets {
		out = append(out, plugin.Object{Kind: plugin.KindSecret, Name: n})
	}
	return out
}

// cachedObject is what the ConfigMap and Secret caches keep of an object (see
// compactMetadata): ~100 bytes instead of a PartialObjectMetadata's ~300 plus its labels.
type cachedObject struct {
	Name, Namespace, ResourceVersion string
	// Deleting: it has a deletionTimestamp. OptedIn: it matched the selector. RSOwned: an
	// apps ReplicaSet is among its owners (opted-in objects only).
	Deleting, OptedIn, RSOwned bool
	// Orphaning: a workload (the workload caches) being deleted with the orphan finalizer.
	Orphaning bool
	// Owners are its owner references' UIDs, UID its own (opted-in objects only): the patch
	// carries it as a precondition, and pending references are kept per UID.
	Owners []types.UID
	UID    types.UID
	// AnchorOwners are the UIDs of its ControllerRevision owners (objects not opted in only):
	// anchors of another installation, or of a time it was opted in, that this one must not
	// delete (foreignRefs).
	AnchorOwners []types.UID
	// Labels are the labels the opt-in selector looks at (opted-in objects only).
	Labels map[string]string
	// Refs are the objects a workload's current template references (the Deployment cache).
	Refs []plugin.Object
}

// GetObjectKind is required by runtime.Object.
func (o *cachedObject) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject is required by runtime.Object; the cache never modifies its objects.
func (o *cachedObject) DeepCopyObject() runtime.Object {
	out := *o
	out.Owners = slices.Clone(o.Owners)
	out.Labels = maps.Clone(o.Labels)
	out.Refs = slices.Clone(o.Refs)
	return &out
}

// GetObjectMeta lets client-go's meta.Accessor (store keys, the informer's
// resourceVersion comparison) read the name, namespace and resourceVersion.
func (o *cachedObject) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Name: o.Name, Namespace: o.Namespace, ResourceVersion: o.ResourceVersion}
}

// maxShared bounds the strings and label sets an interner keeps: namespaces and the values of
// the selector's keys are few; beyond the bound each object keeps its own copy, as before.
const maxShared = 4096

// interner shares the strings and label sets that thousands of cached objects repeat: the
// namespace (each decoded object carries its own copy) and the selector's labels of opted-in
// objects (one small map per object otherwise, ~450 bytes each: at 10k ReplicaSets with 2
// objects each, the largest item of the cache). Shared values are never modified: the
// cache's objects are read-only, and DeepCopyObject clones the label map.
type interner struct {
	mu     sync.Mutex
	names  map[string]string
	labels map[string]map[string]string
}

// name returns the shared copy of s.
func (in *interner) name(s string) string {
	in.mu.Lock()
	defer in.mu.Unlock()
	if v, ok := in.names[s]; ok {
		return v
	}
	if in.names == nil {
		in.names = map[string]string{}
	}
	if len(in.names) < maxShared {
		s = strings.Clone(s)
		in.names[s] = s
	}
	return s
}

// labelSet returns a shared map equal to l, whose keys are among keys (the selector's
// requirement keys, in a fixed order).
func (in *interner) labelSet(keys []string, l map[string]string) map[string]string {
	var b strings.Builder
	for _, k := range keys {
		if v, ok := l[k]; ok {
			b.WriteString(k)
			b.WriteByte('=')
			b.WriteString(v)
		}
		b.WriteByte(0)
	}
	id := b.String()
	in.mu.Lock()
	defer in.mu.Unlock()
	if m, ok := in.labels[id]; ok {
		return m
	}
	m := map[string]string{}
	for _, k := range keys {
		if v, ok := l[k]; ok {
			m[k] = v
		}
	}
	if in.labels == nil {
		in.labels = map[string]map[string]string{}
	}
	if len(in.labels) < maxShared {
		in.labels[id] = m
	}
	return m
}
