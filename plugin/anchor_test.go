package plugin

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
)

// TestAnchorVerdict is the delete rule's table: an anchor goes only when nothing it stands for
// needs it any more.
func TestAnchorVerdict(t *testing.T) {
	grace := time.Minute
	pending := []Object{{KindConfigMap, "old"}}
	for _, c := range []struct {
		name  string
		s     AnchorState
		del   bool
		after time.Duration
	}{
		{"current template: kept", AnchorState{Current: true, WorkloadExists: true}, false, 0},
		{"current even with unsettled objects: kept", AnchorState{Current: true, WorkloadExists: true, Unsettled: pending}, false, 0},
		{"template moved on, every user owns: deleted at once", AnchorState{WorkloadExists: true}, true, 0},
		{"template moved on, a live Job not an owner yet: kept, looked at again", AnchorState{WorkloadExists: true, Unsettled: pending}, false, 5 * time.Second},
		{"workload gone within the grace: kept until the grace ends", AnchorState{GoneFor: 20 * time.Second}, false, 40 * time.Second},
		{"workload gone just now: kept for the whole grace", AnchorState{}, false, time.Minute},
		{"workload gone past the grace: deleted", AnchorState{GoneFor: time.Minute}, true, 0},
		{"workload gone past the grace, a user not owning yet: kept", AnchorState{GoneFor: 2 * time.Minute, Unsettled: pending}, false, 5 * time.Second},
		// A crowd anchor (the many Jobs and Pods of one object): no grace.
		{"crowd: its Jobs and Pods too many to own one by one: kept", AnchorState{Crowd: true, Current: true, WorkloadExists: true}, false, 0},
		{"crowd: few again, one not an owner yet: kept, looked at again", AnchorState{Crowd: true, WorkloadExists: true, Unsettled: pending}, false, 5 * time.Second},
		{"crowd: few again, each owns the object itself: deleted at once", AnchorState{Crowd: true, WorkloadExists: true}, true, 0},
		{"crowd: no grace, whatever the workload fields say", AnchorState{Crowd: true}, true, 0},
		{"crowd: no grace, a user not owning yet: kept", AnchorState{Crowd: true, Unsettled: pending}, false, 5 * time.Second},
		// An anchor that owns an object another installation adopts is never this one's to delete.
		{"another install's object: kept, whatever else", AnchorState{WorkloadExists: true, Foreign: pending}, false, 0},
		{"another install's object, workload gone past the grace: kept", AnchorState{GoneFor: 2 * time.Minute, Foreign: pending}, false, 0},
		{"another install's object, crowd not needed here: kept", AnchorState{Crowd: true, Foreign: pending}, false, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			del, after := AnchorVerdict(c.s, grace)
			if del != c.del || after != c.after {
				t.Fatalf("AnchorVerdict(%+v) = %v, %v; want %v, %v", c.s, del, after, c.del, c.after)
			}
		})
	}
}

func TestAnchorRoundTrip(t *testing.T) {
	a := NewAnchor("CronJob", "report", []Object{{KindSecret, "s"}, {KindConfigMap, "b"}, {KindConfigMap, "a"}, {KindConfigMap, "a"}})
	if got := a.Refs; len(got) != 3 || got[0] != (Object{KindConfigMap, "a"}) || got[2] != (Object{KindSecret, "s"}) {
		t.Fatalf("refs not sorted and deduplicated: %v", got)
	}
	cr := a.ControllerRevision("ns", "uid-ns")
	if !IsAnchor(cr) || cr.Annotations[AnchorWorkloadAnnotation] != "CronJob/report" {
		t.Fatalf("anchor object: %+v", cr.ObjectMeta)
	}
	// Its one owner is its Namespace, as controller: no workload's deletion takes it, and no
	// StatefulSet or DaemonSet adopts it.
	if refs := cr.OwnerReferences; len(refs) != 1 || !NamespaceController(metav1.GetControllerOfNoCopy(cr), "ns") || refs[0].UID != "uid-ns" {
		t.Fatalf("anchor owners: %+v", refs)
	}
	if NamespaceController(&cr.OwnerReferences[0], "other") {
		t.Fatal("an anchor's Namespace reference names its own namespace")
	}
	// A labelled revision with other owners is no anchor (adopted by a workload controller, or
	// the label copied onto another revision): never read as one, never deleted.
	adopted := cr.DeepCopy()
	adopted.OwnerReferences = append(adopted.OwnerReferences, metav1.OwnerReference{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db", UID: "uid-db"})
	ownerless := cr.DeepCopy()
	ownerless.OwnerReferences = nil
	for _, c := range []*appsv1.ControllerRevision{adopted, ownerless} {
		if _, ok := ParseAnchor(c); ok {
			t.Errorf("ParseAnchor accepted owners %v", c.OwnerReferences)
		}
	}
	back, ok := ParseAnchor(cr)
	if !ok || !back.Equal(a) {
		t.Fatalf("ParseAnchor = %+v, %v; want %+v", back, ok, a)
	}
	other := NewAnchor("CronJob", "report", []Object{{KindConfigMap, "a"}})
	if other.ObjectName() == a.ObjectName() {
		t.Fatal("two reference sets of one workload share an anchor name")
	}
	if NewAnchor("Deployment", "report", a.Refs).ObjectName() == a.ObjectName() {
		t.Fatal("two kinds share an anchor name")
	}
	long := NewAnchor(KindDeployment, strings.Repeat("a", 198)+".-x"+strings.Repeat("b", 50), a.Refs).ObjectName()
	if errs := validation.IsDNS1123Subdomain(long); len(errs) > 0 {
		t.Fatalf("anchor name %q: %v", long, errs)
	}
	cr.Labels[AnchorLabel] = "false"
	if _, ok := ParseAnchor(cr); ok {
		t.Fatal("a ControllerRevision without the anchor label parsed as an anchor")
	}
	cr.Labels[AnchorLabel] = "true"
	cr.Data.Raw = []byte(`{"workload":"CronJob/report","references":["Pod/x"]}`)
	if _, ok := ParseAnchor(cr); ok {
		t.Fatal("an anchor naming a Pod parsed")
	}
}

func TestRevisionTemplate(t *testing.T) {
	tmpl := corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}}}}}}
	// The statefulset and daemonset controllers' getPatch: the template with "$patch": "replace".
	var raw map[string]any
	b, _ := json.Marshal(tmpl)
	_ = json.Unmarshal(b, &raw)
	raw["$patch"] = "replace"
	data, _ := json.Marshal(map[string]any{"spec": map[string]any{"template": raw}})
	yes := true
	for _, c := range []struct {
		name string
		ref  *metav1.OwnerReference
		ok   bool
	}{
		{"StatefulSet", &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "s", Controller: &yes}, true},
		{"DaemonSet", &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "d", Controller: &yes}, true},
		{"another group's StatefulSet (OpenKruise)", &metav1.OwnerReference{APIVersion: "apps.kruise.io/v1beta1", Kind: "StatefulSet", Name: "s", Controller: &yes}, false},
		{"no controller", nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			cr := &appsv1.ControllerRevision{Data: runtime.RawExtension{Raw: data}}
			if c.ref != nil {
				cr.OwnerReferences = []metav1.OwnerReference{*c.ref}
			}
			got, ok := RevisionTemplate(cr)
			if ok != c.ok {
				t.Fatalf("ok = %v, want %v", ok, c.ok)
			}
			if ok && !TemplateReferences(&got.Spec).Has(Object{KindConfigMap, "cfg"}) {
				t.Fatalf("decoded template lost its reference: %+v", got.Spec)
			}
		})
	}
}

// TestOwnerPatchKinds: every owner kind is written with its own apiVersion and kind; a
// ReplicaSet stays as it always was.
func TestOwnerPatchKinds(t *testing.T) {
	b := ownerPatchFor("u", []Owner{{Name: "rs", UID: "1"}, {Kind: OwnerControllerRevision, Name: "cr", UID: "2"}, {Kind: OwnerJob, Name: "j", UID: "3"}, {Kind: OwnerPod, Name: "p", UID: "4"}})
	want := `{"metadata":{"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"rs","uid":"1"},{"apiVersion":"apps/v1","kind":"ControllerRevision","name":"cr","uid":"2"},{"apiVersion":"batch/v1","kind":"Job","name":"j","uid":"3"},{"apiVersion":"v1","kind":"Pod","name":"p","uid":"4"}],"uid":"u"}}`
	if string(b) != want {
		t.Fatalf("patch\n got %s\nwant %s", b, want)
	}
}

// TestOwnersOfEveryKind: the one rule over every owning user: live owners own, a gone
// controller's do not, an unknown controller blocks.
func TestOwnersOfEveryKind(t *testing.T) {
	u := Users{
		ReplicaSets: []ReplicaSetUser{{ReplicaSet: Owner{Name: "rs"}, Controller: ControllerLive}},
		Owners: []OwnerUser{
			{Owner: Owner{Kind: OwnerControllerRevision, Name: "sts-1"}, Controller: ControllerLive},
			{Owner: Owner{Kind: OwnerJob, Name: "job-gone"}, Controller: ControllerGone},
			{Owner: Owner{Kind: OwnerPod, Name: "deleting", Deleting: true}, Controller: ControllerNone},
			{Owner: Owner{Kind: OwnerControllerRevision, Name: "anchor"}, Controller: ControllerNone},
		},
	}
	owners, blockers := ownersOf(u)
	var names []string
	for _, o := range owners {
		names = append(names, o.ReplicaSet.String())
	}
	if strings.Join(names, ",") != "rs,ControllerRevision sts-1,ControllerRevision anchor" || len(blockers) != 0 {
		t.Fatalf("owners %v, blockers %v", names, blockers)
	}
	u.Owners = append(u.Owners, OwnerUser{Owner: Owner{Kind: OwnerJob, Name: "wf"}, Controller: ControllerUnknown})
	if _, blockers := ownersOf(u); len(blockers) != 1 || !strings.Contains(blockers[0], "Job wf") {
		t.Fatalf("an unknown controller's Job does not block: %v", blockers)
	}
}

// TestCrowdAnchor: a crowd anchor stands for exactly one object, named by it; a labelled
// revision claiming to be a crowd of another object is no anchor.
func TestCrowdAnchor(t *testing.T) {
	o := Object{KindSecret, "db." + strings.Repeat("x", 240)}
	a := CrowdAnchor(o)
	if !a.Crowd() || a.Workload() != "Crowd/secret."+o.Name || !a.Uses(o) || len(a.Refs) != 1 {
		t.Fatalf("crowd anchor of %s: %+v", o, a)
	}
	if errs := validation.IsDNS1123Subdomain(a.ObjectName()); len(errs) > 0 {
		t.Fatalf("crowd anchor name %q: %v", a.ObjectName(), errs)
	}
	if back, ok := CrowdObject(CrowdName(o)); !ok || back != o {
		t.Fatalf("CrowdObject(%q) = %v, %v", CrowdName(o), back, ok)
	}
	if CrowdAnchor(Object{KindConfigMap, o.Name}).ObjectName() == a.ObjectName() {
		t.Fatal("a ConfigMap and a Secret of one name share a crowd anchor")
	}
	cr := a.ControllerRevision("ns", "uid-ns")
	if back, ok := ParseAnchor(cr); !ok || !back.Equal(a) {
		t.Fatalf("ParseAnchor = %+v, %v", back, ok)
	}
	for _, bad := range []string{
		`{"workload":"Crowd/secret.other","references":["Secret/` + o.Name + `"]}`,
		`{"workload":"Crowd/secret.` + o.Name + `","references":["Secret/` + o.Name + `","ConfigMap/a"]}`,
		`{"workload":"Crowd/configmap.` + o.Name + `","references":["Secret/` + o.Name + `"]}`,
	} {
		cr.Data.Raw = []byte(bad)
		if _, ok := ParseAnchor(cr); ok {
			t.Errorf("parsed as a crowd anchor: %s", bad)
		}
	}
	for _, name := range []string{"pod.x", "configmap.", "configmap", "ConfigMap.x"} {
		if _, ok := CrowdObject(name); ok {
			t.Errorf("CrowdObject(%q) accepted", name)
		}
	}
}

// jobUsers are n Jobs of a live CronJob that use an object.
func jobUsers(n int) []OwnerUser {
	out := make([]OwnerUser, n)
	for i := range out {
		out[i] = OwnerUser{Owner: Owner{Kind: OwnerJob, Name: fmt.Sprintf("job-%d", i), UID: types.UID(fmt.Sprintf("uid-job-%d", i))}, Controller: ControllerLive}
	}
	return out
}

// TestOwnersCapped: up to MaxUserOwners Jobs and Pods own one by one; one more, and their
// crowd anchor owns instead (waiting for it while it does not exist); the other kinds are
// never capped.
func TestOwnersCapped(t *testing.T) {
	crowd := Owner{Kind: OwnerControllerRevision, Name: CrowdAnchor(Object{KindConfigMap, "cfg"}).ObjectName(), UID: "uid-crowd"}
	rs := ReplicaSetUser{ReplicaSet: Owner{Name: "rs", UID: "uid-rs"}, Controller: ControllerLive}
	bare := OwnerUser{Owner: Owner{Kind: OwnerPod, Name: "debug", UID: "uid-pod"}, Controller: ControllerNone}
	names := func(owners []Owner) string {
		var out []string
		for _, o := range owners {
			out = append(out, o.String())
		}
		return strings.Join(out, ",")
	}
	for _, c := range []struct {
		name      string
		u         Users
		owners    int // how many owners
		crowd     bool
		pending   bool
		needCrowd bool
	}{
		{"at the cap: every Job owns", Users{ReplicaSets: []ReplicaSetUser{rs}, Owners: jobUsers(MaxUserOwners)}, MaxUserOwners + 1, false, false, false},
		{"at the cap with a crowd: every Job owns, the crowd is not called for", Users{Owners: jobUsers(MaxUserOwners), Crowd: &crowd}, MaxUserOwners, false, false, false},
		{"a bare Pod over the cap, no crowd yet: waits for it", Users{ReplicaSets: []ReplicaSetUser{rs}, Owners: append(jobUsers(MaxUserOwners), bare)}, 1, false, true, true},
		{"over the cap with the crowd: the ReplicaSet and the crowd", Users{ReplicaSets: []ReplicaSetUser{rs}, Owners: append(jobUsers(40), bare), Crowd: &crowd}, 2, true, false, true},
		{"over the cap, the crowd being deleted: waits for a new one", Users{Owners: jobUsers(40), Crowd: &Owner{Kind: OwnerControllerRevision, Name: crowd.Name, UID: "old", Deleting: true}}, 0, false, true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			owners, blockers := OwnersOf(c.u)
			if len(owners) != c.owners {
				t.Errorf("%d owners (%s), want %d", len(owners), names(owners), c.owners)
			}
			if got := containsOwner(owners, crowd.UID); got != c.crowd {
				t.Errorf("crowd among the owners: %v, want %v (%s)", got, c.crowd, names(owners))
			}
			if pending := len(blockers) == 1 && strings.HasSuffix(blockers[0], AnchorPending); pending != c.pending || (!c.pending && len(blockers) > 0) {
				t.Errorf("blockers %q, want pending %v", blockers, c.pending)
			}
			if got := CrowdNeeded(c.u); got != c.needCrowd {
				t.Errorf("CrowdNeeded = %v, want %v", got, c.needCrowd)
			}
		})
	}
	// 20 Jobs use it, 12 own it, and 20 references of Jobs that are gone are still there (the
	// collector removes them a moment later): the other 8 do not fit, the crowd stays their
	// owner; once the dead references are gone, they fit, and the crowd is not called for.
	jobs := jobUsers(20)
	var owned []types.UID
	for _, j := range jobs[:12] {
		owned = append(owned, j.Owner.UID)
	}
	for i := range 20 {
		owned = append(owned, types.UID(fmt.Sprintf("uid-dead-%d", i)))
	}
	full := Users{ReplicaSets: []ReplicaSetUser{rs}, Owners: jobs, Crowd: &crowd, Owned: append(append([]types.UID{crowd.UID, rs.ReplicaSet.UID}, owned...), owned[0])}
	if owners, _ := OwnersOf(full); !CrowdNeeded(full) || len(owners) != 2 || !containsOwner(owners, crowd.UID) {
		t.Errorf("8 Jobs beside 32 references: crowd needed %v, owners %s; want the ReplicaSet and the crowd", CrowdNeeded(full), names(owners))
	}
	full.Owned = append([]types.UID{crowd.UID, rs.ReplicaSet.UID}, owned[:12]...)
	if owners, _ := OwnersOf(full); CrowdNeeded(full) || len(owners) != 21 {
		t.Errorf("8 Jobs beside 12: crowd needed %v, %d owners; want every Job and the ReplicaSet", CrowdNeeded(full), len(owners))
	}
	// Every Job owns already: nothing to add, whatever else the list holds.
	full.Owned = append(full.Owned, owned...)
	for _, j := range jobs {
		full.Owned = append(full.Owned, j.Owner.UID)
	}
	if CrowdNeeded(full) {
		t.Error("the crowd called for with every Job an owner")
	}

	// Jobs whose controller is gone or that are being deleted do not count: they are going.
	gone := jobUsers(40)
	for i := range gone[:10] {
		gone[i].Controller = ControllerGone
	}
	if CrowdNeeded(Users{Owners: gone}) {
		t.Error("Jobs being collected counted towards the cap")
	}
}
