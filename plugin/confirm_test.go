package plugin

import (
	"context"
	"maps"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/metadata"

	"github.com/configmap-attacher/configmap-attacher/test/support/fakemeta"
)

// countingMeta counts the metadata requests per verb and resource and refuses GETs of the
// resources in noGet with 403, as RBAC without get does.
type countingMeta struct {
	metadata.Interface
	noGet map[string]bool
	mu    sync.Mutex
	n     map[string]int
}

func (c *countingMeta) Resource(gvr schema.GroupVersionResource) metadata.Getter {
	return countingGetter{c, gvr, c.Interface.Resource(gvr)}
}

func (c *countingMeta) count(k string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[k]++
}

type countingGetter struct {
	c   *countingMeta
	gvr schema.GroupVersionResource
	metadata.Getter
}

func (g countingGetter) Namespace(ns string) metadata.ResourceInterface {
	return countingResource{g.c, g.gvr, g.Getter.Namespace(ns)}
}

type countingResource struct {
	c   *countingMeta
	gvr schema.GroupVersionResource
	metadata.ResourceInterface
}

func (r countingResource) Get(ctx context.Context, name string, o metav1.GetOptions, sub ...string) (*metav1.PartialObjectMetadata, error) {
	r.c.count("get " + r.gvr.Resource)
	if r.c.noGet[r.gvr.Resource] {
		return nil, apierrors.NewForbidden(r.gvr.GroupResource(), name, nil)
	}
	return r.ResourceInterface.Get(ctx, name, o, sub...)
}

func (r countingResource) List(ctx context.Context, o metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
	r.c.count("list " + r.gvr.Resource)
	return r.ResourceInterface.List(ctx, o)
}

// countingKube serves the ReplicaSet reads of Kube from a typed fake, counted like
// countingMeta's, refusing GETs when noGet["replicasets"].
type countingKube struct {
	Kube
	c    *countingMeta
	kube *fake.Clientset
}

func (k countingKube) GetReplicaSet(ctx context.Context, ns, name string) (*appsv1.ReplicaSet, error) {
	k.c.count("get replicasets")
	if k.c.noGet["replicasets"] {
		return nil, apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "replicasets"}, name, nil)
	}
	return k.kube.AppsV1().ReplicaSets(ns).Get(ctx, name, metav1.GetOptions{})
}

func (k countingKube) ListReplicaSets(ctx context.Context, ns string, o metav1.ListOptions) (*appsv1.ReplicaSetList, error) {
	k.c.count("list replicasets")
	return k.kube.AppsV1().ReplicaSets(ns).List(ctx, o)
}

// TestConfirmOwnersReadsByName: the live confirmation of new owners is one GET per ReplicaSet and
// per controller when get is allowed (etcd answers at once), and falls back to a list by name
// when RBAC refuses get, remembered per resource: the second confirmation sends no GET of that
// resource. Either way a ReplicaSet that is gone, has another UID, or whose Deployment is gone
// is not confirmed, so decideOwners drops it.
func TestConfirmOwnersReadsByName(t *testing.T) {
	yes := true
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "dep-uid"}}
	rs := func(name, uid string, controller *appsv1.Deployment) *appsv1.ReplicaSet {
		r := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: k8stypes.UID("rs-" + uid)}}
		if controller != nil {
			r.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: controller.Name, UID: controller.UID, Controller: &yes}}
		}
		return r
	}
	kube := fake.NewClientset(dep, rs("bare", "1", nil), rs("of-web", "2", dep), rs("of-gone", "3", &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "gone", UID: "gone-uid"}}))
	owners := []Owner{{Name: "bare", UID: "rs-1"}, {Name: "of-web", UID: "rs-2"}, {Name: "of-gone", UID: "rs-3"}, {Name: "bare", UID: "rs-other"}, {Name: "missing", UID: "rs-4"}}
	for _, tc := range []struct {
		name  string
		noGet map[string]bool
		first map[string]int // requests of the first confirmation
		again map[string]int // of the second
	}{
		{"get allowed", nil,
			map[string]int{"get replicasets": 5, "get deployments": 2},
			map[string]int{"get replicasets": 5, "get deployments": 2}},
		{"get refused", map[string]bool{"replicasets": true, "deployments": true},
			map[string]int{"get replicasets": 1, "list replicasets": 5, "get deployments": 1, "list deployments": 2},
			map[string]int{"list replicasets": 5, "list deployments": 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			meta := &countingMeta{Interface: fakemeta.New(kube), noGet: tc.noGet, n: map[string]int{}}
			a := &Attacher{Meta: meta, Client: countingKube{c: meta, kube: kube}}
			for i, want := range []map[string]int{tc.first, tc.again} {
				meta.n = map[string]int{}
				live, err := a.confirmOwners(context.Background(), "ns", owners)
				if err != nil {
					t.Fatal(err)
				}
				got := decideOwners(ownerFacts{users: ownersAsUsers(owners), live: live}).add
				if len(got) != 2 || got[0].UID != "rs-1" || got[1].UID != "rs-2" {
					t.Errorf("confirmation %d kept %+v, want bare (rs-1) and of-web (rs-2)", i+1, got)
				}
				if !maps.Equal(meta.n, want) {
					t.Errorf("confirmation %d sent %v, want %v", i+1, meta.n, want)
				}
			}
		})
	}
}

// ownersAsUsers are owners as the users that call for them (no controller to check).
func ownersAsUsers(owners []Owner) Users {
	var u Users
	for _, o := range owners {
		u.ReplicaSets = append(u.ReplicaSets, ReplicaSetUser{ReplicaSet: o, Controller: ControllerNone})
	}
	return u
}
