package audit

import (
	"encoding/json"
	"errors"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	rolloutsfake "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned/fake"
	appsv1 "k8s.io/api/apps/v1"
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
	"github.com/configmap-attacher/configmap-attacher/plugin/clientset"
	"github.com/configmap-attacher/configmap-attacher/test/support/fixtures"
)

const wantAuditText = `Rollout shop/web
├─ ReplicaSet web-rev3 (current, revision 3)
│  ├─ ConfigMap cfg-3          MISSING OWNER
│  ├─ ConfigMap cfg-legacy-ok  owned
│  ├─ ConfigMap static         not opted in
│  └─ Secret sec-3             owned
├─ ReplicaSet web-rev2 (revision 2)
│  ├─ ConfigMap cfg-2          MISSING OWNER
│  ├─ ConfigMap cfg-opt        absent (optional reference)
│  └─ ConfigMap static         not opted in
├─ ReplicaSet web-rev1 (revision 1)
│  ├─ ConfigMap cfg-1          LOST (does not exist)
│  └─ ConfigMap shared         MISSING OWNER (not opted in: -fix leaves it alone)
└─ not used by any ReplicaSet
   ├─ ConfigMap cfg-named      UNOWNED
   └─ ConfigMap cfg-stray      STRAY OWNER
  LOST     ConfigMap cfg-1: ReplicaSet web-rev1 (revision 1) references it, but it does not exist: a rollback to that ReplicaSet, or a restart of its pods, would fail with CreateContainerConfigError. Recreate it from that revision's manifests
  LEGACY   ConfigMap cfg-2: owner reference 0 is the original tool's controller reference to ReplicaSet web-rev1, which does not use it (the wrong ReplicaSet). ReplicaSet web-rev2 uses it without owning it: run audit -fix first (it adds them), then remove the reference by hand
           $ kubectl patch configmap cfg-2 -n shop --type=json -p '[{"op":"test","path":"/metadata/ownerReferences/0/uid","value":"uid-rev1"},{"op":"remove","path":"/metadata/ownerReferences/0"}]'
  UNOWNED  ConfigMap cfg-3: opted in (configmap-attacher/revisioned=true), but no ReplicaSet owns it: it will never be garbage-collected; -fix adds ReplicaSet web-rev3, which uses it
  LEGACY   ConfigMap cfg-legacy-ok: owner reference 0 is the original tool's controller reference to ReplicaSet web-rev3 (which uses it): configmap-attacher writes controller: false, so that several ReplicaSets can own an object. Turn it into a plain owner reference by hand
           $ kubectl patch configmap cfg-legacy-ok -n shop --type=json -p '[{"op":"test","path":"/metadata/ownerReferences/0/uid","value":"uid-rev3"},{"op":"replace","path":"/metadata/ownerReferences/0/controller","value":false}]'
  UNOWNED  ConfigMap cfg-named: named in a configmap-attacher step, but no ReplicaSet owns it: it will never be garbage-collected; no ReplicaSet of Rollout shop/web uses it: if nothing else does, delete it by hand
  STRAY    ConfigMap cfg-stray: owner reference 1 is ReplicaSet web-rev2, which does not use it: it keeps the object until that ReplicaSet is deleted. No ReplicaSet of the Rollout uses it: remove the reference by hand only if the object is to be kept (without it, nothing collects the object)
           $ kubectl patch configmap cfg-stray -n shop --type=json -p '[{"op":"test","path":"/metadata/ownerReferences/1/uid","value":"uid-rev2"},{"op":"remove","path":"/metadata/ownerReferences/1"}]'
  STRAY    ConfigMap cfg-stray: owner reference 0 is ReplicaSet web-rev3, which does not use it: it keeps the object until that ReplicaSet is deleted. No ReplicaSet of the Rollout uses it: remove the reference by hand only if the object is to be kept (without it, nothing collects the object)
           $ kubectl patch configmap cfg-stray -n shop --type=json -p '[{"op":"test","path":"/metadata/ownerReferences/0/uid","value":"uid-rev3"},{"op":"remove","path":"/metadata/ownerReferences/0"}]'
  STRAY    ConfigMap shared: owner reference 0 is ReplicaSet web-rev2, which does not use it: it keeps the object until that ReplicaSet is deleted. ReplicaSet web-rev1 uses it without owning it, and it is not opted in: the object is deleted with its other owners. Label it configmap-attacher/revisioned=true and run audit -fix first, then remove the reference by hand
           $ kubectl patch configmap shared -n shop --type=json -p '[{"op":"test","path":"/metadata/ownerReferences/0/uid","value":"uid-rev2"},{"op":"remove","path":"/metadata/ownerReferences/0"}]'

Opted-in objects (configmap-attacher/revisioned=true) that no audited workload uses and nothing owns
  UNOWNED  ConfigMap orphan: opted in (configmap-attacher/revisioned=true), but nothing owns it and no ReplicaSet of an audited workload in shop uses it: it will never be garbage-collected. If nothing uses it any more, delete it by hand

missing owners: 2 owner reference(s) can be added: run again with -fix
not opted in: 1 ReplicaSet(s) use objects that other ReplicaSets own; -fix leaves them alone (label them configmap-attacher/revisioned=true to let it add owners)
findings: 1 lost, 3 unowned, 3 stray, 2 legacy
`

func TestAuditText(t *testing.T) {
	kube, ro := auditScenario()
	code, out, stderr := runAudit(t, clientsOf(kube, ro), run{namespace: testNS})
	if code != exitFail {
		t.Errorf("exit %d, want 1 (an object is lost): %s", code, stderr)
	}
	if out != wantAuditText {
		t.Errorf("text output:\n%s\nwant:\n%s", out, wantAuditText)
	}
	if strings.Contains(out+stderr, "s3cr3t") || strings.Contains(out+stderr, "color: blue") {
		t.Error("object data in the output")
	}
	// Reads only: one list of each kind in the namespace, nothing else.
	var got []string
	for _, a := range kube.Actions() {
		got = append(got, a.GetVerb()+" "+a.GetResource().Resource)
	}
	if want := "list deployments,list replicasets,list configmaps,list secrets"; strings.Join(got, ",") != want {
		t.Errorf("kube requests %v, want %s", got, want)
	}
	var rgot []string
	for _, a := range ro.Actions() {
		rgot = append(rgot, a.GetVerb()+" "+a.GetResource().Resource)
	}
	if strings.Join(rgot, ",") != "list rollouts" {
		t.Errorf("rollouts requests %v, want one list", rgot)
	}
}

func TestAuditJSON(t *testing.T) {
	kube, ro := auditScenario()
	code, out, _ := runAudit(t, clientsOf(kube, ro), run{namespace: testNS, rollout: "web", json: true})
	if code != exitFail {
		t.Errorf("exit %d, want 1", code)
	}
	_, again, _ := runAudit(t, clientsOf(kube, ro), run{namespace: testNS, rollout: "web", json: true})
	if out != again {
		t.Error("two runs on the same state gave different JSON")
	}
	var doc struct {
		Selector string `json:"selector"`
		Rollouts []struct {
			Namespace, Name string
			ReplicaSets     []struct {
				Name, Revision string
				Current        bool
				Objects        []struct{ Kind, Name, Status string }
			}
			Objects []struct {
				Kind, Name    string
				MissingOwners []string
				Fixable       bool
				Owners        []struct {
					Index      int
					Controller bool
				}
			}
			Findings []struct{ Type, Kind, Name, Message, Command, ReplicaSet string }
		}
		Unattributed []json.RawMessage
		Summary      map[string]int
		Fix          *json.RawMessage
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if len(doc.Rollouts) != 1 || doc.Rollouts[0].Name != "web" || doc.Selector != "configmap-attacher/revisioned=true" || doc.Fix != nil {
		t.Fatalf("rollouts %+v", doc.Rollouts)
	}
	r := doc.Rollouts[0]
	if len(r.ReplicaSets) != 3 || !r.ReplicaSets[0].Current || r.ReplicaSets[0].Name != "web-rev3" || r.ReplicaSets[2].Revision != "1" {
		t.Errorf("replicaSets %+v", r.ReplicaSets)
	}
	if e := r.ReplicaSets[2].Objects[0]; e.Name != "cfg-1" || e.Status != EdgeLost {
		t.Errorf("rev1's first object %+v", e)
	}
	var types []string
	for _, f := range r.Findings {
		types = append(types, f.Type+":"+f.Name+":"+f.ReplicaSet)
		if f.Message == "" || f.Kind != "ConfigMap" {
			t.Errorf("finding without message or kind: %+v", f)
		}
	}
	want := "lost:cfg-1: legacy:cfg-2:web-rev1 unowned:cfg-3: legacy:cfg-legacy-ok:web-rev3 unowned:cfg-named: stray:cfg-stray:web-rev2 stray:cfg-stray:web-rev3 stray:shared:web-rev2"
	if strings.Join(types, " ") != want {
		t.Errorf("findings\n%s\nwant\n%s", strings.Join(types, " "), want)
	}
	// -rollout audits that Rollout only: no namespace-wide orphans.
	if len(doc.Unattributed) != 0 {
		t.Errorf("unattributed with -rollout: %d", len(doc.Unattributed))
	}
	wantSummary := map[string]int{"lost": 1, "unowned": 2, "stray": 3, "legacy": 2, "missingOwners": 3, "fixable": 2, "errors": 0}
	for k, v := range wantSummary {
		if doc.Summary[k] != v {
			t.Errorf("summary %s = %d, want %d (%v)", k, doc.Summary[k], v, doc.Summary)
		}
	}
	for _, o := range r.Objects {
		switch o.Name {
		case "cfg-2":
			if !o.Fixable || strings.Join(o.MissingOwners, ",") != "web-rev2" || len(o.Owners) != 1 || !o.Owners[0].Controller {
				t.Errorf("cfg-2 %+v", o)
			}
		case "shared":
			if o.Fixable || strings.Join(o.MissingOwners, ",") != "web-rev1" {
				t.Errorf("shared %+v", o)
			}
		case "cfg-x":
			t.Error("the impostor ReplicaSet's object is reported")
		}
	}
	if strings.Contains(out, "s3cr3t") || strings.Contains(out, "color: blue") {
		t.Error("object data in the JSON")
	}
	// With -rollout the Rollout is read with one get.
	if a := ro.Actions(); a[0].GetVerb() != "get" {
		t.Errorf("first rollouts request %s, want get", a[0].GetVerb())
	}
}

func TestAuditFix(t *testing.T) {
	kube, ro := auditScenario()
	before := map[string]*corev1.ConfigMap{}
	cms, _ := kube.CoreV1().ConfigMaps(testNS).List(t.Context(), metav1.ListOptions{})
	for i := range cms.Items {
		before[cms.Items[i].Name] = &cms.Items[i]
	}
	kube.ClearActions()
	code, out, stderr := runAudit(t, clientsOf(kube, ro), run{namespace: testNS, fix: true})
	if code != exitFail { // cfg-1 is still lost: -fix cannot create it
		t.Errorf("exit %d: %s", code, stderr)
	}
	// The report shows the state read again after the fix, and what the fix added.
	for _, want := range []string{
		"│  ├─ ConfigMap cfg-3          owned\n",
		"│  ├─ ConfigMap cfg-2          owned\n",
		"│  └─ ConfigMap shared         MISSING OWNER (not opted in: -fix leaves it alone)\n",
		"fixed: added 2 owner reference(s) to 2 object(s): shop/ConfigMap cfg-2 ← web-rev2; shop/ConfigMap cfg-3 ← web-rev3\n",
		"findings: 1 lost, 2 unowned, 3 stray, 2 legacy\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "run again with -fix") {
		t.Errorf("output after -fix still offers -fix:\n%s", out)
	}
	var patched []string
	for _, a := range kube.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok {
			patched = append(patched, p.GetName())
			if p.GetPatchType() != types.StrategicMergePatchType {
				t.Errorf("patch type %s", p.GetPatchType())
			}
			var body map[string]map[string][]map[string]any
			if err := json.Unmarshal(p.GetPatch(), &body); err != nil || len(body) != 1 || len(body["metadata"]) != 1 {
				t.Errorf("patch body %s: only metadata.ownerReferences may be sent", p.GetPatch())
			}
		} else if a.GetVerb() != "list" { // the audit, before and after
			t.Errorf("unexpected request %s %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
	sort.Strings(patched) // patches run concurrently
	if strings.Join(patched, ",") != "cfg-2,cfg-3" {
		t.Errorf("patched %v, want exactly cfg-2 and cfg-3", patched)
	}
	wantOwners := map[string]string{
		"cfg-2":         "web-rev1:true,web-rev2:false", // the legacy reference stays as it was
		"cfg-3":         "web-rev3:false",
		"cfg-legacy-ok": "web-rev3:true",
		"shared":        "web-rev2:false", // not opted in: web-rev1 is not added
		"static":        "",               // not opted in
		"cfg-stray":     "web-rev2:false,web-rev3:false",
		"cfg-named":     "", // no ReplicaSet uses it
		"orphan":        "",
	}
	for name, want := range wantOwners {
		c, err := kube.CoreV1().ConfigMaps(testNS).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := ownerSet(c.OwnerReferences); got != want {
			t.Errorf("%s owners %q, want %q", name, got, want)
		}
		b := before[name]
		if c.Data["app.yaml"] != b.Data["app.yaml"] || c.Labels["team"] != "shop" || c.Annotations["note"] != "keep" {
			t.Errorf("%s: data, labels or annotations changed", name)
		}
	}
	// A second audit: nothing left to add, nothing removed.
	code, out, _ = runAudit(t, clientsOf(kube, ro), run{namespace: testNS, json: true})
	var rep Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if s := rep.Summary; s.Fixable != 0 || s.MissingOwners != 1 || s.Stray != 3 || s.Legacy != 2 || s.Lost != 1 || s.Unowned != 2 || code != exitFail {
		t.Errorf("after -fix: %+v exit %d", s, code)
	}
	// -fix with nothing to add writes nothing.
	kube.ClearActions()
	_, out, _ = runAudit(t, clientsOf(kube, ro), run{namespace: testNS, fix: true})
	if !strings.Contains(out, "fixed: nothing to add\n") {
		t.Errorf("output %s", out)
	}
	for _, a := range kube.Actions() {
		if a.GetVerb() != "list" {
			t.Errorf("a repeated -fix sent %s %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
}

// A clean Rollout exits 0; a patch the apiserver refuses makes -fix exit 1 with the reason.
func TestAuditExitCodes(t *testing.T) {
	rs := auditRS("rev1", "1", fixtures.PodSpec([]string{"cfg"}, []string{"sec"}))
	sec := fixtures.Secret("sec")
	sec.OwnerReferences = []metav1.OwnerReference{rsRef(rs, false)}
	kube := fake.NewClientset(rs, cm("cfg", true, rsRef(rs, false)), sec, cm("static", false))
	ro := rolloutsfake.NewSimpleClientset(fixtures.Rollout("rev1"))
	code, out, stderr := runAudit(t, clientsOf(kube, ro), run{namespace: testNS})
	if code != exitOK || !strings.HasSuffix(out, "findings: 0 lost, 0 unowned, 0 stray, 0 legacy\n") || strings.Contains(out, "-fix") {
		t.Errorf("clean: exit %d\n%s%s", code, out, stderr)
	}
	// Unowned, stray and legacy do not fail the run; lost does.
	kube = fake.NewClientset(rs, cm("cfg", true), fixtures.Secret("sec"))
	if code, out, _ := runAudit(t, clientsOf(kube, ro), run{namespace: testNS}); code != exitOK || !strings.Contains(out, "1 unowned") {
		t.Errorf("unowned only: exit %d\n%s", code, out)
	}
	kube.PrependReactor("patch", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "cfg", errors.New("no"))
	})
	code, out, _ = runAudit(t, clientsOf(kube, ro), run{namespace: testNS, fix: true})
	if code != exitFail || !strings.Contains(out, "fix failed: namespace shop: forbidden to patch ConfigMap cfg") || !strings.Contains(out, "examples/rbac-audit.yaml") {
		t.Errorf("forbidden fix: exit %d\n%s", code, out)
	}
	// A missing Rollout, or reads that are forbidden, exit 1 with the reason on stderr.
	code, _, stderr = runAudit(t, clientsOf(kube, ro), run{namespace: testNS, rollout: "nope"})
	if code != exitFail || !strings.Contains(stderr, "Rollout shop/nope not found") {
		t.Errorf("missing rollout: exit %d %s", code, stderr)
	}
	denied := rolloutsfake.NewSimpleClientset()
	denied.PrependReactor("list", "rollouts", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "argoproj.io", Resource: "rollouts"}, "", errors.New("no"))
	})
	code, _, stderr = runAudit(t, clientsOf(kube, denied), run{})
	if code != exitFail || !strings.Contains(stderr, "forbidden to read rollouts.argoproj.io in any namespace") || !strings.Contains(stderr, "list on rollouts.argoproj.io, replicasets.apps, configmaps and secrets") {
		t.Errorf("forbidden: exit %d %s", code, stderr)
	}
	// A namespace whose Secrets cannot be listed is reported per Rollout, and exits 1.
	kube = fake.NewClientset(rs)
	kube.PrependReactor("list", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "", errors.New("no"))
	})
	code, out, _ = runAudit(t, clientsOf(kube, ro), run{namespace: testNS})
	if code != exitFail || !strings.Contains(out, "└─ ERROR forbidden to read secrets in namespace shop") || !strings.Contains(out, "errors: 1 Rollout(s) could not be audited") {
		t.Errorf("per-namespace error: exit %d\n%s", code, out)
	}
}

// -A: one list of Rollouts, then one list of each kind per namespace that has Rollouts.
func TestAuditAllNamespaces(t *testing.T) {
	a := fixtures.Rollout("h1")
	b := fixtures.Rollout("h1")
	b.Namespace, b.UID = "other", "uid-rollout-b"
	rsA := auditRS("h1", "1", fixtures.PodSpec([]string{"cfg"}, nil))
	rsB := auditRS("h1", "1", fixtures.PodSpec([]string{"cfg"}, nil))
	rsB.Namespace, rsB.UID = "other", "uid-b"
	rsB.OwnerReferences[0].UID = b.UID
	cmB := cm("cfg", true)
	cmB.Namespace = "other"
	kube := fake.NewClientset(rsA, rsB, cm("cfg", true, rsRef(rsA, false)), cmB)
	ro := rolloutsfake.NewSimpleClientset(a, b)
	code, out, stderr := runAudit(t, clientsOf(kube, ro), run{json: true})
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Rollouts) != 2 || rep.Rollouts[0].Namespace != "other" || rep.Rollouts[1].Namespace != "shop" {
		t.Fatalf("rollouts %+v", rep.Rollouts)
	}
	if rep.Summary.Fixable != 1 || rep.Summary.Unowned != 1 || rep.Rollouts[0].Findings[0].Namespace != "other" {
		t.Errorf("summary %+v findings %+v", rep.Summary, rep.Rollouts[0].Findings)
	}
	counts := map[string]int{}
	for _, act := range kube.Actions() {
		counts[act.GetVerb()+" "+act.GetResource().Resource+" "+act.GetNamespace()]++
	}
	for _, ns := range []string{"shop", "other"} {
		for _, r := range []string{"replicasets", "configmaps", "secrets"} {
			if counts["list "+r+" "+ns] != 1 {
				t.Errorf("list %s in %s: %d (%v)", r, ns, counts["list "+r+" "+ns], counts)
			}
		}
	}
	// 6, and one list of Deployments across the namespaces (-workloads defaults to both kinds).
	if len(kube.Actions()) != 7 || counts["list deployments "] != 1 {
		t.Errorf("%d requests, want 7: %v", len(kube.Actions()), counts)
	}
	if ra := ro.Actions(); len(ra) != 1 || ra[0].GetVerb() != "list" || ra[0].GetNamespace() != "" {
		t.Errorf("rollouts requests %v", ra)
	}
	// -fix in both namespaces: one patch, in "other".
	kube.ClearActions()
	if code, out, _ := runAudit(t, clientsOf(kube, ro), run{fix: true}); code != exitOK || !strings.Contains(out, "fixed: added 1 owner reference(s) to 1 object(s): other/ConfigMap cfg ← web-h1") {
		t.Errorf("exit %d\n%s", code, out)
	}
	c, _ := kube.CoreV1().ConfigMaps("other").Get(t.Context(), "cfg", metav1.GetOptions{})
	if ownerSet(c.OwnerReferences) != "web-h1:false" || c.OwnerReferences[0].UID != "uid-b" {
		t.Errorf("other/cfg owners %+v", c.OwnerReferences)
	}
}

// -selector and a step's discover selector opt objects in; the default label then does not.
func TestAuditSelectors(t *testing.T) {
	rs := auditRS("h1", "1", fixtures.PodSpec([]string{"by-team", "by-step-selector", "default-label"}, nil))
	teamCM := cm("by-team", false)
	teamCM.Labels["team"] = "shop"
	stepCM := cm("by-step-selector", false)
	stepCM.Labels = map[string]string{"rev": "yes"}
	defCM := cm("default-label", true)
	defCM.Labels = map[string]string{optIn: "true"}
	kube := fake.NewClientset(rs, teamCM, stepCM, defCM)
	ro := rolloutsfake.NewSimpleClientset(withSteps(fixtures.Rollout("h1"), `{"discover":{"selector":{"matchLabels":{"rev":"yes"}}}}`))
	_, out, _ := runAudit(t, clientsOf(kube, ro), run{namespace: testNS, selector: "team=shop"})
	for _, want := range []string{"opted in (rev=yes, a step's discover selector)", "opted in (team=shop)", "ConfigMap default-label     not opted in", "findings: 0 lost, 2 unowned"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q\n%s", want, out)
		}
	}
	_, out, _ = runAudit(t, clientsOf(kube, ro), run{namespace: testNS, selector: "team=shop", fix: true})
	if !strings.Contains(out, "fixed: added 2 owner reference(s) to 2 object(s): shop/ConfigMap by-step-selector ← web-h1; shop/ConfigMap by-team ← web-h1\n") ||
		!strings.Contains(out, "ConfigMap default-label     not opted in") {
		t.Errorf("output\n%s", out)
	}
	if c, _ := kube.CoreV1().ConfigMaps(testNS).Get(t.Context(), "default-label", metav1.GetOptions{}); len(c.OwnerReferences) != 0 {
		t.Error("-selector replaces the default label, yet default-label got an owner")
	}
}

// A workloadRef Rollout without a selector takes the Deployment's.
func TestAuditWorkloadRef(t *testing.T) {
	ro := fixtures.Rollout("h1")
	ro.Spec.Selector = nil
	ro.Spec.WorkloadRef = &v1alpha1.ObjectRef{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: testNS},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}
	kube := fake.NewClientset(d, auditRS("h1", "1", fixtures.PodSpec([]string{"gone"}, nil)))
	code, out, _ := runAudit(t, clientsOf(kube, rolloutsfake.NewSimpleClientset(ro)), run{namespace: testNS})
	if code != exitFail || !strings.Contains(out, "ConfigMap gone  LOST (does not exist)") || !strings.Contains(out, "pods of the current ReplicaSet cannot start (CreateContainerConfigError)") {
		t.Errorf("exit %d\n%s", code, out)
	}
	// The namespace's Deployments are listed (they are audited too): the workloadRef is
	// resolved from that list, not with one more request.
	for _, a := range kube.Actions() {
		if a.GetVerb() == "get" && a.GetResource().Resource == "deployments" {
			t.Errorf("Deployment read again with a GET after the namespace's list")
		}
	}
	// Auditing Rollouts only, nothing lists Deployments: one GET resolves the workloadRef.
	kube.ClearActions()
	if code, out, _ = runAudit(t, clientsOf(kube, rolloutsfake.NewSimpleClientset(ro)), run{namespace: testNS, workloads: []string{plugin.KindRollout}}); !strings.Contains(out, "ConfigMap gone  LOST (does not exist)") {
		t.Errorf("rollouts only: exit %d\n%s", code, out)
	}
	gets := 0
	for _, a := range kube.Actions() {
		if a.GetVerb() == "get" && a.GetResource().Resource == "deployments" {
			gets++
		}
	}
	if gets != 1 {
		t.Errorf("rollouts only: %d Deployment GETs, want 1", gets)
	}
	// Without the Deployment the Rollout cannot be audited: an error, exit 1.
	kube = fake.NewClientset(auditRS("h1", "1", fixtures.PodSpec(nil, nil)))
	code, out, _ = runAudit(t, clientsOf(kube, rolloutsfake.NewSimpleClientset(ro)), run{namespace: testNS})
	if code != exitFail || !strings.Contains(out, "ERROR Deployment shop/web named by spec.workloadRef of Rollout web does not exist") {
		t.Errorf("exit %d\n%s", code, out)
	}
}

// With a metadata client (the default outside tests) ConfigMaps and Secrets are listed as
// metadata only, and the result is the same.
func TestAuditMetadataClient(t *testing.T) {
	kube, ro := auditScenario()
	scheme := metadatafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	var objs []runtime.Object
	cms, _ := kube.CoreV1().ConfigMaps(testNS).List(t.Context(), metav1.ListOptions{})
	for _, c := range cms.Items {
		objs = append(objs, &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: c.ObjectMeta})
	}
	secs, _ := kube.CoreV1().Secrets(testNS).List(t.Context(), metav1.ListOptions{})
	for _, s := range secs.Items {
		objs = append(objs, &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}, ObjectMeta: s.ObjectMeta})
	}
	md := metadatafake.NewSimpleMetadataClient(scheme, objs...)
	kube.ClearActions()
	if code, out, errb := runAudit(t, clientset.Clients{Kube: kube, Meta: md, Rollouts: ro}, run{namespace: testNS}); code != exitFail || out != wantAuditText {
		t.Errorf("exit %d, output\n%s%s", code, out, errb)
	}
	for _, a := range kube.Actions() {
		if r := a.GetResource().Resource; r != "replicasets" && r != "deployments" {
			t.Errorf("typed client used for %s", r)
		}
	}
	if n := len(md.Actions()); n != 2 {
		t.Errorf("metadata requests %d, want 2", n)
	}
}

// TestAuditDeployments: Deployments are audited like Rollouts (their ReplicaSets by controller
// UID, the current one as the Deployment controller finds it), -fix adopts their opted-in
// objects, and -workloads chooses the kinds.
func TestAuditDeployments(t *testing.T) {
	t1 := true
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: testNS, UID: "uid-deploy"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "api"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "api"}}, Spec: fixtures.PodSpec([]string{"api-2"}, nil)}}}
	rsFor := func(name, rev string, spec corev1.PodSpec) *appsv1.ReplicaSet {
		return &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS, UID: types.UID("uid-" + name),
			Labels:          map[string]string{"app": "api", "pod-template-hash": name},
			Annotations:     map[string]string{plugin.DeploymentRevisionAnnotation: rev},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "api", UID: "uid-deploy", Controller: &t1}}},
			Spec: appsv1.ReplicaSetSpec{Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "api", "pod-template-hash": name}}, Spec: spec}}}
	}
	kube := fake.NewClientset(d, rsFor("api-rs1", "1", fixtures.PodSpec([]string{"api-1"}, nil)), rsFor("api-rs2", "2", fixtures.PodSpec([]string{"api-2"}, nil)),
		cm("api-2", true), cm("unrelated", false))
	ro := rolloutsfake.NewSimpleClientset()
	code, out, stderr := runAudit(t, clientsOf(kube, ro), run{namespace: testNS})
	for _, want := range []string{"Deployment shop/api\n", "ReplicaSet api-rs2 (current, revision 2)", "ConfigMap api-2", "MISSING OWNER", "ConfigMap api-1", "LOST (does not exist)", "findings: 1 lost, 1 unowned"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s%s", want, out, stderr)
		}
	}
	if code != exitFail {
		t.Errorf("exit %d, want 1 (api-1 is lost)", code)
	}
	if _, _, _ = runAudit(t, clientsOf(kube, ro), run{namespace: testNS, fix: true}); len(owners(t, kube, plugin.KindConfigMap, "api-2")) != 1 {
		t.Errorf("-fix did not adopt api-2: %v", owners(t, kube, plugin.KindConfigMap, "api-2"))
	}
	if _, out, _ = runAudit(t, clientsOf(kube, ro), run{namespace: testNS, workloads: []string{plugin.KindRollout}, explicitKinds: true}); strings.Contains(out, "Deployment shop/api") {
		t.Errorf("-workloads rollouts audited the Deployment:\n%s", out)
	}
	// Without the Rollout CRD: defaulted, Deployments only with a warning; named, an error.
	ro.PrependReactor("list", "rollouts", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(schema.GroupResource{Group: "argoproj.io", Resource: "rollouts"}, "")
	})
	if code, out, stderr := runAudit(t, clientsOf(kube, ro), run{namespace: testNS}); !strings.Contains(out, "Deployment shop/api") || !strings.Contains(stderr, "not installed") {
		t.Errorf("defaulted without the CRD: exit %d\n%s%s", code, out, stderr)
	}
	if code, _, stderr := runAudit(t, clientsOf(kube, ro), run{namespace: testNS, workloads: []string{plugin.KindRollout, plugin.KindDeployment}, explicitKinds: true}); code != exitFail || !strings.Contains(stderr, "Rollout CRD (rollouts.argoproj.io) is not installed") {
		t.Errorf("named without the CRD: exit %d %s", code, stderr)
	}
	// The exit code of the defaulted run, and a bad -workloads: plugin/cmd TestAuditWorkloadsFlag.
}

// History is ordered by creation time (plugin.SortReplicaSets), never by revision: undo gives
// the re-used ReplicaSet web-a, the oldest, the newest revision; it is current and shown
// first, then the others newest first by creation (web-c, then web-b), although web-b's
// revision is higher.
func TestAuditHistoryByCreationTime(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(hash, rev string, offset time.Duration) *appsv1.ReplicaSet {
		rs := auditRS(hash, rev, fixtures.PodSpec([]string{"cfg-" + hash}, nil))
		rs.CreationTimestamp = metav1.Time{Time: t0.Add(offset)}
		return rs
	}
	kube := fake.NewClientset(at("a", "4", 0), at("c", "2", 2*time.Hour), at("b", "3", time.Hour),
		cm("cfg-a", true), cm("cfg-b", true), cm("cfg-c", true))
	ro := rolloutsfake.NewSimpleClientset(fixtures.Rollout("a"))
	_, out, _ := runAudit(t, clientsOf(kube, ro), run{namespace: testNS, json: true})
	var rep Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, rs := range rep.Rollouts[0].ReplicaSets {
		got = append(got, rs.Name+":"+rs.Revision+":"+map[bool]string{true: "current", false: ""}[rs.Current])
	}
	if want := "web-a:4:current web-c:2: web-b:3:"; strings.Join(got, " ") != want {
		t.Errorf("history %s, want %s", strings.Join(got, " "), want)
	}
}

// TestUnattributedUsedByAnotherUser: an opted-in object that no audited workload uses but a
// StatefulSet does is not called deletable: the finding says who uses it and to keep it.
func TestUnattributedUsedByAnotherUser(t *testing.T) {
	kube, ro := auditScenario()
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "cache", Namespace: testNS},
		Spec: appsv1.StatefulSetSpec{Template: corev1.PodTemplateSpec{Spec: fixtures.PodSpec([]string{"orphan"}, nil)}}}
	if _, err := kube.AppsV1().StatefulSets(testNS).Create(t.Context(), sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a := New(clientsOf(kube, ro), nil)
	rep, err := a.Run(t.Context(), testNS, "", false)
	if err != nil {
		t.Fatal(err)
	}
	a.AddShared(t.Context(), rep)
	var got string
	for _, f := range rep.Unattributed {
		if f.Name == "orphan" {
			got = f.Message
		}
	}
	if !strings.Contains(got, "StatefulSet cache uses it: keep it") || strings.Contains(got, "delete it by hand") {
		t.Errorf("unattributed finding for orphan: %q", got)
	}
}

// TestUnattributedOwnedByRevisionIsNotUnowned: an opted-in object that the controller made a
// dependent of a StatefulSet's ControllerRevision (every user owns) is collected with that
// revision: audit must not call it unowned, nor tell anyone to delete it by hand, even when
// no audited workload uses it and the namespace's users are not read (Run without AddShared).
func TestUnattributedOwnedByRevisionIsNotUnowned(t *testing.T) {
	kube, ro := auditScenario()
	crRef := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ControllerRevision", Name: "cache-5d4f", UID: "uid-cr"}
	if _, err := kube.CoreV1().ConfigMaps(testNS).Create(t.Context(), cm("cache-cfg", true, crRef), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rep, err := New(clientsOf(kube, ro), nil).Run(t.Context(), testNS, "", false)
	if err != nil {
		t.Fatal(err)
	}
	var orphanSeen bool
	for _, f := range rep.Unattributed {
		switch f.Name {
		case "cache-cfg":
			t.Errorf("an object a ControllerRevision owns is reported: %s %q", f.Type, f.Message)
		case "orphan":
			orphanSeen = true // the control: an object nothing owns still is
		}
	}
	if !orphanSeen {
		t.Error("the unowned orphan is not reported: the check above proves nothing")
	}
}
