package cleanup

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/configmap-attacher/configmap-attacher/plugin"
)

const ns = "shop"

func cm(name string) plugin.Object { return plugin.Object{Kind: plugin.KindConfigMap, Name: name} }

// anchorCR is the anchor of kind/name using refs, as the controller creates it, with a UID.
func anchorCR(kind, name string, refs ...plugin.Object) *appsv1.ControllerRevision {
	cr := plugin.NewAnchor(kind, name, refs).ControllerRevision(ns, types.UID("uid-ns-"+ns))
	cr.UID = types.UID("uid-" + cr.Name)
	cr.ResourceVersion = "7"
	return cr
}

func podSpec(cms ...string) corev1.PodSpec {
	var vols []corev1.Volume
	for _, c := range cms {
		vols = append(vols, corev1.Volume{Name: c, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: c}}}})
	}
	return corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:1"}}, Volumes: vols}
}

func ownerRef(apiVersion, kind, name string, uid types.UID) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: uid}
}

func crRef(cr *appsv1.ControllerRevision) metav1.OwnerReference {
	return ownerRef("apps/v1", "ControllerRevision", cr.Name, cr.UID)
}

// scenario: Deployment web is gone (its anchor alone owns web-1); Deployment api is live and
// its ReplicaSet owns api-1 beside the anchor; CronJob nightly is live and its anchor alone
// keeps nightly-1 (between runs); a labelled ControllerRevision that does not read as an
// anchor; a StatefulSet's revision (no label).
type scenario struct {
	kube                *fake.Clientset
	meta                *metadatafake.FakeMetadataClient
	web, api, nightly   *appsv1.ControllerRevision
	unreadable, stsRev  *appsv1.ControllerRevision
	objects, apiObjects []runtime.Object
}

func newScenario(t *testing.T, mutate ...func(*scenario)) *scenario {
	t.Helper()
	s := &scenario{
		web:     anchorCR(plugin.KindDeployment, "web", cm("web-1")),
		api:     anchorCR(plugin.KindDeployment, "api", cm("api-1")),
		nightly: anchorCR("CronJob", "nightly", cm("nightly-1")),
	}
	s.unreadable = &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: "odd", Namespace: ns, UID: "uid-odd",
		Labels: map[string]string{plugin.AnchorLabel: "true"}}, Data: runtime.RawExtension{Raw: []byte(`{"format":"other"}`)}}
	s.stsRev = &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: "db-5d8f", Namespace: ns, UID: "uid-db-rev"}}
	api := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: ns, UID: "uid-api"},
		Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: podSpec("api-1")}}}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "api-6f9", Namespace: ns, UID: "uid-api-rs"}}
	nightly := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: ns, UID: "uid-nightly"},
		Spec: batchv1.CronJobSpec{Schedule: "0 0 * * *", JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: podSpec("nightly-1")}}}}}
	s.objects = []runtime.Object{s.web, s.api, s.nightly, s.unreadable, s.stsRev, api, rs, nightly}
	s.apiObjects = []runtime.Object{
		meta("v1", "ConfigMap", "web-1", crRef(s.web)),
		meta("v1", "ConfigMap", "api-1", ownerRef("apps/v1", "ReplicaSet", rs.Name, rs.UID), crRef(s.api)),
		meta("v1", "ConfigMap", "nightly-1", crRef(s.nightly)),
		meta("apps/v1", "ReplicaSet", rs.Name),
	}
	s.apiObjects[3].(*metav1.PartialObjectMetadata).UID = rs.UID
	for _, m := range mutate {
		m(s)
	}
	s.kube = fake.NewClientset(s.objects...)
	scheme := metadatafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	s.meta = metadatafake.NewSimpleMetadataClient(scheme, s.apiObjects...)
	return s
}

func meta(apiVersion, kind, name string, owners ...metav1.OwnerReference) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: apiVersion, Kind: kind},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name), OwnerReferences: owners}}
}

func (s *scenario) run(t *testing.T, c Cleaner) *Report {
	t.Helper()
	c.Kube, c.Meta = s.kube, s.meta
	rep, err := c.Run(context.Background())
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return rep
}

// deletes returns the names of the ControllerRevisions deleted, each checked for its UID and
// resourceVersion preconditions.
func (s *scenario) deletes(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, a := range s.kube.Actions() {
		d, ok := a.(k8stesting.DeleteActionImpl)
		if !ok {
			continue
		}
		if d.GetResource().Resource != "controllerrevisions" {
			t.Errorf("deleted a %s: cleanup deletes only anchors", d.GetResource().Resource)
		}
		p := d.DeleteOptions.Preconditions
		if p == nil || p.UID == nil || *p.UID != types.UID("uid-"+d.Name) || p.ResourceVersion == nil {
			t.Errorf("delete of %s without its UID and resourceVersion preconditions: %+v", d.Name, p)
		}
		out = append(out, d.Name)
	}
	return out
}

func actions(rep *Report) map[string]string {
	m := map[string]string{}
	for _, a := range rep.Anchors {
		m[a.Name] = a.Action
	}
	return m
}

func text(rep *Report) string {
	var b bytes.Buffer
	rep.WriteText(&b)
	return b.String()
}

// Safe by default: the CronJob's anchor is the last keeper of its current config, so nothing
// is deleted; the report names the object, its user and the command that keeps it.
func TestRefusesWhileNeeded(t *testing.T) {
	s := newScenario(t)
	rep := s.run(t, Cleaner{})
	if got := s.deletes(t); len(got) != 0 {
		t.Errorf("deleted %v although an anchor is needed", got)
	}
	want := map[string]string{s.web.Name: ActionWouldDelete, s.api.Name: ActionWouldDelete, s.nightly.Name: ActionKept, "odd": ActionLeftAlone}
	if got := actions(rep); !mapsEqual(got, want) {
		t.Errorf("actions %v, want %v", got, want)
	}
	if !rep.Failed() {
		t.Error("a refused run does not fail")
	}
	out := text(rep)
	for _, w := range []string{
		"KEPT         anchor shop/" + s.nightly.Name + " (CronJob/nightly, live): the last keeper of objects its live workload uses",
		"ConfigMap nightly-1 is used by CronJob/nightly and no other live owner keeps it",
		`$ kubectl patch configmap nightly-1 -n shop --type=json -p '[{"op":"test","path":"/metadata/ownerReferences/0/uid","value":"uid-` + s.nightly.Name + `"},{"op":"remove","path":"/metadata/ownerReferences/0"}]'`,
		"nothing was deleted", "-force",
		"LEFT ALONE   anchor shop/odd: labelled configmap-attacher.io/anchor but not readable",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("report lacks %q:\n%s", w, out)
		}
	}
}

// With -force every anchor goes, the unreadable one and the StatefulSet's revision stay.
func TestForceDeletesEveryAnchor(t *testing.T) {
	s := newScenario(t)
	rep := s.run(t, Cleaner{Force: true})
	got := strings.Join(s.deletes(t), ",")
	if want := strings.Join([]string{s.api.Name, s.nightly.Name, s.web.Name}, ","); got != want {
		t.Errorf("deleted %s, want %s", got, want)
	}
	if rep.Failed() {
		t.Errorf("a forced run that deleted every anchor failed:\n%s", text(rep))
	}
	for _, name := range []string{"odd", "db-5d8f"} {
		if _, err := s.kube.AppsV1().ControllerRevisions(ns).Get(context.Background(), name, metav1.GetOptions{}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// Without a needed anchor: the anchors of gone and of live workloads go at once.
func TestDeletesWhenNothingNeeded(t *testing.T) {
	s := newScenario(t, func(s *scenario) {
		// A Job of the CronJob owns its config too.
		s.apiObjects[2] = meta("v1", "ConfigMap", "nightly-1", crRef(s.nightly), ownerRef("batch/v1", "Job", "nightly-1234", "uid-nightly-1234"))
		s.apiObjects = append(s.apiObjects, meta("batch/v1", "Job", "nightly-1234"))
	})
	rep := s.run(t, Cleaner{})
	if got := len(s.deletes(t)); got != 3 {
		t.Errorf("deleted %d anchors, want 3:\n%s", got, text(rep))
	}
	if rep.Failed() || rep.Summary[ActionDeleted] != 3 || rep.Summary[ActionLeftAlone] != 1 {
		t.Errorf("summary %v", rep.Summary)
	}
	if out := text(rep); !strings.Contains(out, "DELETED      anchor shop/"+s.web.Name+" (Deployment/web, gone): its workload is gone") {
		t.Errorf("report:\n%s", out)
	}
}

// A CronJob whose jobTemplate moved on no longer uses the anchor's object: not needed. An
// owner of a kind cleanup does not check, or one re-created with another UID, is no keeper.
func TestNeedRules(t *testing.T) {
	s := newScenario(t, func(s *scenario) {
		for _, o := range s.objects {
			if cj, ok := o.(*batchv1.CronJob); ok {
				cj.Spec.JobTemplate.Spec.Template.Spec = podSpec("nightly-2")
			}
		}
		s.apiObjects[0] = meta("v1", "ConfigMap", "web-1", crRef(s.web), ownerRef("example.com/v1", "Widget", "w", "uid-w"))
		s.apiObjects[1] = meta("v1", "ConfigMap", "api-1", ownerRef("apps/v1", "ReplicaSet", "api-6f9", "uid-old-rs"), crRef(s.api))
	})
	rep := s.run(t, Cleaner{DryRun: true})
	want := map[string]string{s.web.Name: ActionWouldDelete, s.api.Name: ActionKept, s.nightly.Name: ActionWouldDelete, "odd": ActionLeftAlone}
	if got := actions(rep); !mapsEqual(got, want) {
		t.Errorf("actions %v, want %v:\n%s", got, want, text(rep))
	}
	if got := s.deletes(t); len(got) != 0 {
		t.Errorf("-dry-run deleted %v", got)
	}
}

// -namespaces lists only those namespaces; a re-created anchor (another UID) is left alone.
func TestNamespacesAndConflict(t *testing.T) {
	s := newScenario(t)
	s.kube.PrependReactor("delete", "controllerrevisions", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apiConflict()
	})
	rep := s.run(t, Cleaner{Namespaces: []string{ns}, Force: true})
	for _, a := range s.kube.Actions() {
		if a.GetVerb() == "list" && a.GetNamespace() != ns {
			t.Errorf("listed in %q", a.GetNamespace())
		}
	}
	if rep.Summary[ActionChanged] != 3 || rep.Summary[ActionLeftAlone] != 1 || !rep.Failed() {
		t.Errorf("summary %v", rep.Summary)
	}
}

// -stop-controller scales the controller's Deployment to 0 before the first delete and waits
// until its pods are gone.
func TestStopsControllerFirst(t *testing.T) {
	two := int32(2)
	s := newScenario(t, func(s *scenario) {
		s.objects = append(s.objects, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "cma", Namespace: "cma-system", Generation: 1},
			Spec: appsv1.DeploymentSpec{Replicas: &two}, Status: appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 2}})
	})
	gets := 0
	s.kube.PrependReactor("get", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetNamespace() != "cma-system" {
			return false, nil, nil
		}
		gets++
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "cma", Namespace: "cma-system", Generation: 2},
			Status: appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 1}}
		if gets > 2 {
			d.Status.Replicas = 0
		}
		return true, d, nil
	})
	rep := s.run(t, Cleaner{Force: true, StopNamespace: "cma-system", StopName: "cma", StopTimeout: time.Minute, Poll: time.Millisecond})
	var order []string
	for _, a := range s.kube.Actions() {
		switch {
		case a.GetVerb() == "patch" && a.GetSubresource() == "scale":
			order = append(order, "scale")
		case a.GetVerb() == "delete":
			order = append(order, "delete")
		}
	}
	if len(order) != 4 || order[0] != "scale" || gets != 3 {
		t.Errorf("requests %v after %d gets, want the scale, 3 gets, then the deletes", order, gets)
	}
	if rep.Stopped != "cma-system/cma" {
		t.Errorf("stopped %q", rep.Stopped)
	}

	// Refused: the controller is not stopped (the failed uninstall leaves it running).
	s = newScenario(t)
	s.run(t, Cleaner{StopNamespace: "cma-system", StopName: "cma", StopTimeout: time.Minute})
	for _, a := range s.kube.Actions() {
		if a.GetVerb() == "patch" {
			t.Errorf("a refused run patched %s", a.GetResource().Resource)
		}
	}
}

func TestJSON(t *testing.T) {
	s := newScenario(t)
	rep := s.run(t, Cleaner{})
	var b bytes.Buffer
	if err := rep.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Anchors []struct {
			Name, Action, Workload string
			Needs                  []struct{ Kind, Name, Command string }
		}
		Note    string
		Summary map[string]int
	}
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	if doc.Note == "" || doc.Summary[ActionKept] != 1 || len(doc.Anchors) != 4 {
		t.Errorf("JSON %s", b.String())
	}
	for _, a := range doc.Anchors {
		if a.Action == ActionKept && (a.Workload != "CronJob/nightly" || len(a.Needs) != 1 || a.Needs[0].Name != "nightly-1" || a.Needs[0].Command == "") {
			t.Errorf("kept anchor %+v", a)
		}
	}
}

func apiConflict() error {
	return apierrors.NewConflict(schema.GroupResource{Group: "apps", Resource: "controllerrevisions"}, "x", errors.New("precondition failed: UID"))
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
