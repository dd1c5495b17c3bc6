package core

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/configmap-attacher/configmap-attacher/test/support/realapi"

	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/plugin/audit"
	"github.com/configmap-attacher/configmap-attacher/plugin/clientset"
	"github.com/configmap-attacher/configmap-attacher/plugin/cmd"
)

// "Every user counts" against the real control plane: before an object gets an owner, every
// user of it in the namespace is known. Every live ReplicaSet whose template references it
// counts whatever controls it, except one whose controller is gone; config shared beyond one
// workload is the controller mode's to maintain (the one-shot modes refuse it without a live
// controller).

// ---- helpers ----------------------------------------------------------------------------

// ---- 1. recreated app, garbage collector held back ----------------------------------------

// TestRecreatedAppGCHeldBack: the app "web" is deleted and re-created while the garbage
// collector is frozen, so the dead Rollout's ReplicaSet is still there (no deletionTimestamp)
// and still references the re-created ConfigMap (same name, new UID). The core (ReadUsage +
// Reconcile with a Candidate), the step and the controller mode each make only the new
// ReplicaSet an owner: no write ever names the dead app's ReplicaSet (its controller's UID is
// gone). Once the garbage collector resumes and collects that ReplicaSet, the ConfigMap is
// still there, owned by the new one. With the old rule (every referencing ReplicaSet owns)
// the writes name the dead ReplicaSet.
func TestRecreatedAppGCHeldBack(t *testing.T) {
	c := realapi.Shared(t)
	e := realapi.NewEnv(t, c)
	cfg := realapi.ControllerIdentity(t, c, e.NS, "rbac-step-plugin.yaml")
	spec := realapi.PodSpec([]string{"web-config"}, nil)

	// The app as it was: Rollout, ReplicaSet, the ConfigMap owned by it (through the step).
	oldRO := e.Rollout("web")
	oldRS := e.ReplicaSet(oldRO, "old111", spec)
	e.ConfigMap("web-config")
	realapi.MustSucceed(t, realapi.Run(t, realapi.NewStep(cfg), oldRO, "old111", map[string]any{"configMaps": []string{"web-config"}}))
	e.ExactOwners("before the recreation", "cm", "web-config", oldRS.UID)
	e.WaitObserved(oldRS) // the ReplicaSet controller is done with it before the freeze

	// Prepare the controller mode's binary and identity before the freeze (building takes a while).
	realapi.PluginBinary(t)

	resume := realapi.FreezeControllerManager(t, c)
	bg := metav1.DeletePropagationBackground
	if err := e.Rollouts.ArgoprojV1alpha1().Rollouts(e.NS).Delete(realapi.Ctx(t), "web", metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
		t.Fatal(err)
	}
	if err := e.Admin.CoreV1().ConfigMaps(e.NS).Delete(realapi.Ctx(t), "web-config", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	newCM := e.ConfigMap("web-config") // same name, new UID, no owners
	newRO := e.Rollout("web")          // same name, new UID
	if newRO.UID == oldRO.UID {
		t.Fatal("the Rollout kept its UID")
	}
	newRS := e.ReplicaSet(newRO, "new222", spec) // the new app's ReplicaSet (by hand: nothing runs the Rollout)
	hist := e.WatchOwners("web-config", newCM.ResourceVersion)

	time.Sleep(time.Second)
	if rs := realapi.MustRS(t, e, oldRS.Name); rs.DeletionTimestamp != nil {
		t.Fatalf("the garbage collector is not held back: %s has a deletionTimestamp", rs.Name)
	}

	// a) The core directly: the namespace's users, and the ConfigMap as a candidate.
	a := realapi.AttacherFor(t, e)
	users, err := a.ReadUsage(realapi.Ctx(t), e.NS)
	if err != nil {
		t.Fatal(err)
	}
	res, err := a.Reconcile(realapi.Ctx(t), plugin.Request{Namespace: e.NS, Users: users, Candidates: []plugin.Candidate{e.Candidate("web-config")}})
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if realapi.WritesName(res.Plan.Writes, oldRS.UID) || realapi.WritesName(res.Added, oldRS.UID) {
		t.Errorf("core: the writes name the dead app's ReplicaSet %s: %+v", oldRS.Name, res.Added)
	}
	if !realapi.WritesName(res.Added, newRS.UID) {
		t.Errorf("core: the new ReplicaSet was not added: %+v", res.Added)
	}
	e.ExactOwners("core", "cm", "web-config", newRS.UID)

	// b) The step of the new Rollout, with the ConfigMap listed.
	e.ClearOwners("cm", "web-config")
	res2 := realapi.Run(t, realapi.NewStep(cfg), newRO, "new222", map[string]any{"configMaps": []string{"web-config"}})
	realapi.MustSucceed(t, res2)
	e.ExactOwners("step", "cm", "web-config", newRS.UID)

	// c) The controller mode (the real binary).
	e.ClearOwners("cm", "web-config")
	cp := e.ControllerMode()
	e.WaitOwners("cm", "web-config", 30*time.Second, newRS.UID)
	time.Sleep(2 * time.Second) // a second (wrong) write would come now
	e.ExactOwners("controller", "cm", "web-config", newRS.UID)

	if hist.Named(oldRS.UID) {
		t.Errorf("a write named the dead app's ReplicaSet %s; owner lists seen: %s", oldRS.Name, hist)
	}
	t.Logf("owner lists seen on the watch: %s", hist)

	// The garbage collector resumes: the dead app's ReplicaSet goes, the ConfigMap stays.
	resume()
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err := e.Admin.AppsV1().ReplicaSets(e.NS).Get(realapi.Ctx(t), oldRS.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dead app's ReplicaSet %s was not collected (err %v)", oldRS.Name, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	e.StillThere("cm", "web-config", 3*time.Second)
	e.ExactOwners("after the collection", "cm", "web-config", newRS.UID)
	if !cp.Running() {
		t.Errorf("the controller mode exited: %s", cp.LogTail(20))
	}
}

// ---- 2. shared config across a Rollout and a Deployment -----------------------------------

// TestSharedAcrossRolloutAndDeployment: a Rollout "web" and a Deployment "api" mount the same
// opted-in ConfigMap. The one-shot modes see only the Rollout's later revisions, and no
// controller runs: the step and the Job fail naming api's ReplicaSet and write nothing, and
// audit -fix leaves it alone (an owner reference from web's ReplicaSets alone, or from api's
// current ReplicaSet only, would let the garbage collector delete it under api's later pods).
// The controller mode, which keeps every user's owners current, makes both workloads'
// ReplicaSets owners, so deleting the Rollout's ReplicaSet cannot collect what api still
// mounts. (TestSharedConfigLivesWhileAnyUserDoes: the step beside a live controller.)
func TestSharedAcrossRolloutAndDeployment(t *testing.T) {
	c := realapi.Shared(t)
	e := realapi.NewEnv(t, c)
	cfg := realapi.ControllerIdentity(t, c, e.NS, "rbac-step-plugin.yaml")
	spec := realapi.PodSpec([]string{"shared-cfg"}, nil)
	cm := e.ConfigMap("shared-cfg")
	ro, roRS := e.SettledRollout(corev1.PodTemplateSpec{Spec: spec})
	_, depRS := e.Deployment("api", spec)
	hash := roRS.Labels[plugin.PodTemplateHashLabel]
	refused := "ConfigMap shared-cfg is also used by ReplicaSet " + depRS.Name + " (of Deployment api)"
	unchanged := func(mode string) {
		t.Helper()
		if a := e.State("cm", "shared-cfg"); a.RV != cm.ResourceVersion || len(a.Owners) != 0 {
			t.Errorf("%s wrote the ConfigMap: resourceVersion %s → %s, owners %v", mode, cm.ResourceVersion, a.RV, a.Owners)
		}
	}

	// The step.
	res := realapi.Run(t, realapi.NewStep(cfg), ro, hash, map[string]any{"configMaps": []string{"shared-cfg"}})
	if res.Phase != types.PhaseFailed || !strings.Contains(res.Message, refused) || !strings.Contains(res.Message, "nothing was written") {
		t.Errorf("step: %s: %s", res.Phase, res.Message)
	}
	unchanged("the step")

	// The Job.
	code, stdout, stderr := realapi.RunJob(t, realapi.JobUsersKubeconfig(t, c, e.NS), "-rollout", "web", "-namespace", e.NS, "-configmaps", "shared-cfg")
	if code != cmd.ExitFail || !strings.Contains(stderr, refused) {
		t.Errorf("job: exit %d: %s %s", code, stdout, stderr)
	}
	unchanged("the Job")

	// audit -fix.
	code, out, aerr := realapi.RunAudit(t, &cmd.Audit{}, "-namespace", e.NS, "-kubeconfig", c.KubeconfigPath, "-fix", "-o", "json")
	rep := realapi.AuditJSON(t, out)
	if rep.Fix == nil || len(rep.Fix.Errors) != 0 || len(rep.Fix.Added) != 0 || !realapi.HasString(rep.Fix.Skipped, "ConfigMap shared-cfg is also used by", "no live configmap-attacher controller") {
		t.Fatalf("audit -fix: exit %d fix %+v: %s", code, rep.Fix, aerr)
	}
	unchanged("audit -fix")

	// The controller mode: both ReplicaSets, and the anchor of the Deployment's current
	// template (every user owns).
	e.ControllerMode()
	e.WaitOwnersAndAnchors("cm", "shared-cfg", 30*time.Second, roRS.UID, depRS.UID)

	// Deleting the Rollout's ReplicaSet leaves the ConfigMap to the Deployment's.
	e.DeleteRS(roRS)
	e.StillThere("cm", "shared-cfg", 3*time.Second)
}

// ---- 3. shared config across a Rollout and a StatefulSet ----------------------------------

// TestStatefulSetBlocksAdoption: a Rollout "web" and a StatefulSet "cache" mount the same
// opted-in ConfigMap. An owner reference would let the garbage collector delete it under the
// StatefulSet, so: the step and the Job fail naming "StatefulSet cache" and write nothing;
// audit -fix writes nothing and reports it in fix.skipped; the controller mode, which keeps every
// user's owner current, makes the StatefulSet's anchor an owner beside the ReplicaSet.
func TestStatefulSetBlocksAdoption(t *testing.T) {
	c := realapi.Shared(t)
	e := realapi.NewEnv(t, c)
	cfg := realapi.ControllerIdentity(t, c, e.NS, "rbac-step-plugin.yaml")
	spec := realapi.PodSpec([]string{"web-config"}, nil)
	e.ConfigMap("web-config")
	ro, roRS := e.SettledRollout(corev1.PodTemplateSpec{Spec: spec})
	e.StatefulSet("cache", spec)
	hash := roRS.Labels[plugin.PodTemplateHashLabel]
	before := e.State("cm", "web-config")
	unchanged := func(mode string) {
		t.Helper()
		if a := e.State("cm", "web-config"); a.RV != before.RV || len(a.Owners) != 0 {
			t.Errorf("%s wrote the ConfigMap: resourceVersion %s → %s, owners %v", mode, before.RV, a.RV, a.Owners)
		}
	}
	const blocked = "ConfigMap web-config is also used by StatefulSet cache"

	// The step.
	res := realapi.Run(t, realapi.NewStep(cfg), ro, hash, map[string]any{"configMaps": []string{"web-config"}})
	if res.Phase != types.PhaseFailed || !strings.Contains(res.Message, blocked) || !strings.Contains(res.Message, "nothing was written") {
		t.Errorf("step: %s: %s", res.Phase, res.Message)
	}
	t.Logf("step: %s", res.Message)
	unchanged("the step")

	// The Job.
	code, stdout, stderr := realapi.RunJob(t, realapi.JobUsersKubeconfig(t, c, e.NS), "-rollout", "web", "-namespace", e.NS, "-configmaps", "web-config")
	if code != cmd.ExitFail || !strings.Contains(stderr, blocked) || !strings.Contains(stderr, "nothing was written") {
		t.Errorf("job: exit %d: stdout %q stderr %q", code, stdout, stderr)
	}
	unchanged("the Job")

	// audit -fix.
	_, out, aerr := realapi.RunAudit(t, &cmd.Audit{}, "-namespace", e.NS, "-kubeconfig", c.KubeconfigPath, "-fix", "-o", "json")
	rep := realapi.AuditJSON(t, out)
	if rep.Fix == nil {
		t.Fatalf("audit -fix: no fix result: %s", aerr)
	}
	if len(rep.Fix.Added) != 0 || !realapi.HasString(rep.Fix.Skipped, blocked) {
		t.Errorf("audit -fix: added %q skipped %q errors %q", realapi.AddedNames(rep.Fix), rep.Fix.Skipped, rep.Fix.Errors)
	}
	unchanged("audit -fix")

	// The controller mode maintains every user: the StatefulSet's current template owns
	// through its anchor, beside the Rollout's ReplicaSet (the one-shot modes above cannot keep
	// that true, and wrote nothing).
	e.ControllerMode()
	e.WaitOwnersAndAnchors("cm", "web-config", 60*time.Second, roRS.UID)
}

// ---- 4. audit -fix writes under the same rules -------------------------------------------

// TestAuditFixSameRules: audit -fix writes only what the step and the controller would.
// (a) A Secret the Rollout's configmap-attacher step lists, which the pod template uses only
// as imagePullSecrets and which is not opted in, is a credential: skipped, never adopted,
// while the opted-in ConfigMap beside it is. (b) Under the administrator's Policy
// RequireOptIn, an object that only a step's custom discover selector (team=web) selects is
// skipped; one that is also opted in is adopted; without the policy audit -fix adopts both
// (the control: it was the policy that held the first back).
func TestAuditFixSameRules(t *testing.T) {
	c := realapi.Shared(t)

	t.Run("pull secret named in the step", func(t *testing.T) {
		e := realapi.NewEnv(t, c)
		spec := realapi.PodSpec([]string{"cfg"}, nil)
		spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "regcred"}}
		ro := e.StepRollout("web", `{"secrets":["regcred"],"configMaps":["cfg"]}`, spec)
		rs := e.ReplicaSetOf(ro)
		e.ConfigMap("cfg")
		e.Secret("regcred")
		before := e.State("secret", "regcred")

		_, out, aerr := realapi.RunAudit(t, &cmd.Audit{}, "-namespace", e.NS, "-kubeconfig", c.KubeconfigPath, "-fix", "-o", "json")
		rep := realapi.AuditJSON(t, out)
		if rep.Fix == nil || len(rep.Fix.Errors) != 0 {
			t.Fatalf("audit -fix: fix %+v: %s", rep.Fix, aerr)
		}
		t.Logf("added %q skipped %q", realapi.AddedNames(rep.Fix), rep.Fix.Skipped)
		if got := strings.Join(realapi.AddedNames(rep.Fix), "; "); got != "ConfigMap cfg ← "+rs.Name {
			t.Errorf("added %q, want only ConfigMap cfg ← %s", got, rs.Name)
		}
		// Where it is explained depends on audit's classification (fix.skipped, or a finding
		// before -fix queues it): logged, not asserted.
		if !realapi.HasString(rep.Fix.Skipped, "regcred", "credential") {
			t.Logf("fix.skipped does not name regcred; the report says: %s", realapi.Excerpt(out, "regcred"))
		}
		if a := e.State("secret", "regcred"); a.RV != before.RV || len(a.Owners) != 0 {
			t.Errorf("the pull secret was written: rv %s → %s, owners %v", before.RV, a.RV, a.Owners)
		}
		e.ExactOwners("audit -fix", "cm", "cfg", rs.UID)
	})

	t.Run("custom discover selector under RequireOptIn", func(t *testing.T) {
		e := realapi.NewEnv(t, c)
		ro := e.StepRollout("web", `{"discover":{"selector":{"matchLabels":{"team":"web"}}}}`, realapi.PodSpec([]string{"team-only", "team-opted"}, nil))
		rs := e.ReplicaSetOf(ro)
		for name, lbl := range map[string]map[string]string{
			"team-only":  {"team": "web"},
			"team-opted": {"team": "web", plugin.OptInLabel: "true"},
		} {
			if _, err := e.Admin.CoreV1().ConfigMaps(e.NS).Create(realapi.Ctx(t), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbl},
				Data: map[string]string{"k": name}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		before := e.State("cm", "team-only")

		// The audit command has no policy flag: the Auditor with the Policy, as the command
		// would build it.
		cl, err := clientset.ForConfig(c.AdminConfig)
		if err != nil {
			t.Fatal(err)
		}
		aud := audit.New(cl, realapi.QuietLog())
		aud.Policy = plugin.Policy{RequireOptIn: true}
		rep, err := aud.Run(realapi.Ctx(t), e.NS, "", true)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Fix == nil || len(rep.Fix.Errors) != 0 {
			t.Fatalf("fix %+v", rep.Fix)
		}
		t.Logf("with RequireOptIn: added %q skipped %q", realapi.AddedNames(rep.Fix), rep.Fix.Skipped)
		if got := strings.Join(realapi.AddedNames(rep.Fix), "; "); got != "ConfigMap team-opted ← "+rs.Name {
			t.Errorf("added %q, want only ConfigMap team-opted ← %s", got, rs.Name)
		}
		if !realapi.HasString(rep.Fix.Skipped, "team-only") {
			b, _ := json.Marshal(rep)
			t.Logf("fix.skipped does not name team-only; the report says: %s", realapi.Excerpt(string(b), "team-only"))
		}
		if a := e.State("cm", "team-only"); a.RV != before.RV || len(a.Owners) != 0 {
			t.Errorf("team-only was written under RequireOptIn: rv %s → %s, owners %v", before.RV, a.RV, a.Owners)
		}
		e.ExactOwners("with the policy", "cm", "team-opted", rs.UID)

		// The control: without the policy the step's selector is enough.
		_, out, aerr := realapi.RunAudit(t, &cmd.Audit{}, "-namespace", e.NS, "-kubeconfig", c.KubeconfigPath, "-fix", "-o", "json")
		rep2 := realapi.AuditJSON(t, out)
		if rep2.Fix == nil || len(rep2.Fix.Errors) != 0 {
			t.Fatalf("audit -fix: fix %+v: %s", rep2.Fix, aerr)
		}
		e.ExactOwners("without the policy", "cm", "team-only", rs.UID)
	})
}
