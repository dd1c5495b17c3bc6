package audit

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/configmap-attacher/configmap-attacher/test/support/realapi"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/plugin/audit"
	"github.com/configmap-attacher/configmap-attacher/plugin/cmd"
	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// The audit against a real apiserver, garbage collector running: a Rollout with three
// ReplicaSets, the original tool's controller references (one on the wrong ReplicaSet), a
// lost ConfigMap, unowned opted-in and step-named objects, a stray reference, and static
// config that must never get an owner. audit finds them with one list of each kind; -fix adds
// exactly the missing references (one patch per object) and removes nothing; a second audit
// finds nothing missing; the printed kubectl commands then repair stray and legacy references
// and refuse to run twice.
func TestAudit(t *testing.T) {
	c := realapi.Shared(t)
	e := realapi.NewEnv(t, c)

	ro := &v1alpha1.Rollout{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: e.NS},
		Spec: v1alpha1.RolloutSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "nginx"}}}},
			Strategy: v1alpha1.RolloutStrategy{Canary: &v1alpha1.CanaryStrategy{Steps: []v1alpha1.CanaryStep{
				{Plugin: &v1alpha1.PluginStep{Name: "configmap-attacher/configmap-attacher", Config: json.RawMessage(`{"secrets":["sec-named"]}`)}},
				{Pause: &v1alpha1.RolloutPause{}},
			}}},
		},
	}
	ro, err := e.Rollouts.ArgoprojV1alpha1().Rollouts(e.NS).Create(realapi.Ctx(t), ro, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ro.Status.CurrentPodHash = "rev3"
	if ro, err = e.Rollouts.ArgoprojV1alpha1().Rollouts(e.NS).UpdateStatus(realapi.Ctx(t), ro, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	rev1 := e.Revisioned(ro, "rev1", "1", realapi.PodSpec([]string{"cfg-1", "cfg-shared"}, nil))
	rev2 := e.Revisioned(ro, "rev2", "2", realapi.PodSpec([]string{"cfg-2", "cfg-shared"}, nil))
	rev3 := e.Revisioned(ro, "rev3", "3", realapi.PodSpec([]string{"cfg-3", "static"}, []string{"sec-named", "sec-static"}))
	// cfg-1 is lost: never created.
	e.ConfigMap("cfg-shared")                              // opted in, unowned: -fix adds rev1 and rev2
	e.ConfigMap("cfg-2", realapi.RsOwner(rev1, true))      // legacy, on the wrong ReplicaSet: -fix adds rev2
	e.ConfigMap("cfg-3", realapi.RsOwner(rev3, true))      // legacy, on the right ReplicaSet
	e.ConfigMap("cfg-stray", realapi.RsOwner(rev2, false)) // stray: rev2 does not use it
	e.ConfigMap("orphan")                                  // opted in, nothing uses or owns it
	if _, err := e.Admin.CoreV1().ConfigMaps(e.NS).Create(realapi.Ctx(t), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "static"},
		Data: map[string]string{"shared.yaml": "tier: static"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.Secret("sec-named")  // not labelled, but named in the step: -fix adds rev3
	e.Secret("sec-static") // not labelled, not named: never touched

	objects := map[string]string{"cfg-shared": "cm", "cfg-2": "cm", "cfg-3": "cm", "cfg-stray": "cm", "orphan": "cm", "static": "cm", "sec-named": "secret", "sec-static": "secret"}
	before := map[string]realapi.ObjectState{}
	for n, k := range objects {
		before[n] = e.State(k, n)
	}

	// 1. The text report, with the clients built from -kubeconfig as in production.
	code, out, stderr := realapi.RunAudit(t, &cmd.Audit{}, "-namespace", e.NS, "-kubeconfig", c.KubeconfigPath)
	t.Logf("audit -namespace %s:\n%s", e.NS, out)
	if code != cmd.ExitFail {
		t.Errorf("exit %d, want 1 (cfg-1 is lost): %s", code, stderr)
	}
	for _, want := range []string{
		"Rollout " + e.NS + "/web\n",
		"├─ ReplicaSet web-rev3 (current, revision 3)\n",
		"│  ├─ ConfigMap cfg-3       owned\n",
		"│  ├─ ConfigMap static      not opted in\n",
		"│  ├─ Secret sec-named      MISSING OWNER\n",
		"│  └─ Secret sec-static     not opted in\n",
		"│  ├─ ConfigMap cfg-1       LOST (does not exist)\n",
		"└─ not used by any ReplicaSet\n   └─ ConfigMap cfg-stray   STRAY OWNER\n",
		"  UNOWNED  ConfigMap orphan: opted in",
		"missing owners: 4 owner reference(s) can be added: run again with -fix\n",
		"findings: 1 lost, 3 unowned, 1 stray, 2 legacy\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("audit output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out+stderr, "s3cr3t") || strings.Contains(out+stderr, "color: ") || strings.Contains(out+stderr, "tier: static") {
		t.Error("object data in the output")
	}

	// 2. JSON, counted: one list of Rollouts, Deployments, ReplicaSets, ConfigMaps and Secrets,
	// then the namespace's users for the shared finding (every user counts): ReplicaSets,
	// StatefulSets, DaemonSets, Jobs, CronJobs, Pods and the Rollouts controlling ReplicaSets.
	counter := cluster.NewCounter()
	code, out, _ = realapi.RunAudit(t, realapi.CountedAudit(c.AdminConfig, counter), "-namespace", e.NS, "-o", "json")
	rep := realapi.AuditJSON(t, out)
	want := audit.Counts{Lost: 1, Unowned: 3, Stray: 1, Legacy: 2, MissingOwners: 4, Fixable: 4}
	if rep.Summary != want || code != cmd.ExitFail {
		t.Errorf("summary %+v (exit %d), want %+v", rep.Summary, code, want)
	}
	for _, r := range []string{"deployments", "configmaps", "secrets", "statefulsets", "daemonsets", "controllerrevisions", "jobs", "cronjobs", "pods"} {
		if n := counter.Count("list", r); n != 1 {
			t.Errorf("list %s = %d, want 1 (%s)", r, n, counter)
		}
	}
	for _, r := range []string{"rollouts", "replicasets"} {
		if n := counter.Count("list", r); n != 2 {
			t.Errorf("list %s = %d, want 2: the audit's and the users' (%s)", r, n, counter)
		}
	}
	// The audit's 5 lists, and the users' 8 (ReplicaSets, StatefulSets, DaemonSets, their
	// ControllerRevisions, Jobs, CronJobs, Pods' metadata, the Rollouts that control ReplicaSets).
	if counter.Total() != 5+8 {
		t.Errorf("%d requests, want 13 (%s)", counter.Total(), counter)
	}
	var got []string
	for _, f := range rep.Rollouts[0].Findings {
		got = append(got, f.Type+":"+f.Name+":"+f.ReplicaSet)
	}
	for _, f := range rep.Unattributed {
		got = append(got, f.Type+":"+f.Name+":"+f.ReplicaSet)
	}
	if w := "lost:cfg-1: legacy:cfg-2:web-rev1 legacy:cfg-3:web-rev3 unowned:cfg-shared: stray:cfg-stray:web-rev2 unowned:sec-named: unowned:orphan:"; strings.Join(got, " ") != w {
		t.Errorf("findings\n%s\nwant\n%s", strings.Join(got, " "), w)
	}

	// 3. -fix: one patch per object lacking owners, only opted-in or step-named ones.
	counter = cluster.NewCounter()
	code, out, stderr = realapi.RunAudit(t, realapi.CountedAudit(c.AdminConfig, counter), "-namespace", e.NS, "-fix", "-o", "json")
	rep = realapi.AuditJSON(t, out)
	t.Logf("audit -fix -o json:\n%s", out)
	if code != cmd.ExitFail || rep.Fix == nil || len(rep.Fix.Errors) != 0 {
		t.Fatalf("exit %d fix %+v: %s", code, rep.Fix, stderr)
	}
	var added []string
	for _, a := range rep.Fix.Added {
		added = append(added, fmt.Sprintf("%s %s ← %s", a.Kind, a.Name, strings.Join(a.ReplicaSets, ",")))
	}
	if w := "ConfigMap cfg-2 ← web-rev2; ConfigMap cfg-shared ← web-rev1,web-rev2; Secret sec-named ← web-rev3"; strings.Join(added, "; ") != w {
		t.Errorf("added %q, want %q", strings.Join(added, "; "), w)
	}
	// 3 patches, a list of each kind before and after, and the namespace's users read twice:
	// just before the patches (every user counts: ReplicaSets, StatefulSets, DaemonSets, Jobs,
	// ControllerRevisions, CronJobs, Pods and the Rollouts that control ReplicaSets; as fresh as the step's read, so
	// no owner needs a confirmation of its own), and for the shared finding of the report after.
	if n := counter.Count("patch", "configmaps") + counter.Count("patch", "secrets"); n != 3 || counter.Total() != 3+2*5+2*8 {
		t.Errorf("patches %d, want 3, a list of each kind before and after, and twice 8 lists of the users (%s)", n, counter)
	}
	// The report is the state after the fix.
	if s := rep.Summary; s.Fixable != 0 || s.MissingOwners != 0 || s.Stray != 1 || s.Legacy != 2 || s.Unowned != 1 || s.Lost != 1 {
		t.Errorf("summary after -fix %+v", s)
	}

	// Nothing removed, data untouched, only the missing owners added.
	wantAdded := map[string][]*appsv1.ReplicaSet{"cfg-shared": {rev1, rev2}, "cfg-2": {rev2}, "sec-named": {rev3}}
	for n, k := range objects {
		b, a := before[n], e.State(k, n)
		if a.Data != b.Data || !reflect.DeepEqual(a.Labels, b.Labels) {
			t.Errorf("%s: data or labels changed", n)
		}
		for uid, ctrl := range b.Owners {
			if actrl, ok := a.Owners[uid]; !ok || actrl != ctrl {
				t.Errorf("%s: owner %s changed or removed", n, uid)
			}
		}
		if len(wantAdded[n]) == 0 && a.RV != b.RV {
			t.Errorf("%s was written (resourceVersion %s → %s)", n, b.RV, a.RV)
		}
		if len(a.Owners) != len(b.Owners)+len(wantAdded[n]) {
			t.Errorf("%s owners %v, before %v", n, a.Owners, b.Owners)
		}
		for _, rs := range wantAdded[n] {
			if ctrl, ok := a.Owners[rs.UID]; !ok || ctrl {
				t.Errorf("%s lacks owner %s (controller: false)", n, rs.Name)
			}
		}
	}

	// 4. A second audit: nothing missing; stray and legacy references are still there.
	code, out, _ = realapi.RunAudit(t, &cmd.Audit{}, "-namespace", e.NS, "-kubeconfig", c.KubeconfigPath, "-o", "json")
	rep = realapi.AuditJSON(t, out)
	want = audit.Counts{Lost: 1, Unowned: 1, Stray: 1, Legacy: 2}
	if rep.Summary != want || code != cmd.ExitFail {
		t.Errorf("second audit %+v (exit %d), want %+v", rep.Summary, code, want)
	}

	// 5. The repair commands, run as printed and in the order shown, with the cluster's kubectl.
	var cmds []string
	for _, f := range rep.Rollouts[0].Findings {
		if f.Command != "" {
			cmds = append(cmds, f.Command)
		}
	}
	if len(cmds) != 3 {
		t.Fatalf("commands %q, want one per stray and legacy reference", cmds)
	}
	sh := func(cmd string) ([]byte, error) {
		x := exec.Command("sh", "-c", cmd)
		x.Env = append(os.Environ(), "KUBECONFIG="+c.KubeconfigPath, "PATH="+c.BinDir+string(os.PathListSeparator)+os.Getenv("PATH"))
		return x.CombinedOutput()
	}
	for _, cmd := range cmds {
		if out, err := sh(cmd); err != nil {
			t.Fatalf("%s: %v\n%s", cmd, err, out)
		}
	}
	// The test operation guards each command: run again, it changes nothing and fails.
	rv := e.State("cm", "cfg-2").RV
	if out, err := sh(cmds[0]); err == nil {
		t.Errorf("a repeated command succeeded: %s\n%s", cmds[0], out)
	}
	if e.State("cm", "cfg-2").RV != rv {
		t.Error("a repeated command changed cfg-2")
	}
	code, out, _ = realapi.RunAudit(t, &cmd.Audit{}, "-namespace", e.NS, "-kubeconfig", c.KubeconfigPath, "-o", "json")
	rep = realapi.AuditJSON(t, out)
	// cfg-stray lost its only owner (no ReplicaSet uses it): it is now an unowned orphan.
	want = audit.Counts{Lost: 1, Unowned: 2}
	if rep.Summary != want || code != cmd.ExitFail {
		t.Errorf("after the commands %+v (exit %d), want %+v", rep.Summary, code, want)
	}
	owners := func(name string) string {
		var s []string
		for uid, ctrl := range e.State("cm", name).Owners {
			s = append(s, fmt.Sprintf("%s:%v", uid, ctrl))
		}
		sort.Strings(s)
		return strings.Join(s, ",")
	}
	if got, w := owners("cfg-2"), string(rev2.UID)+":false"; got != w {
		t.Errorf("cfg-2 owners %s, want %s", got, w)
	}
	if got, w := owners("cfg-3"), string(rev3.UID)+":false"; got != w {
		t.Errorf("cfg-3 owners %s, want %s", got, w)
	}
	if got := owners("cfg-stray"); got != "" {
		t.Errorf("cfg-stray owners %s", got)
	}
	for n, k := range objects {
		if a := e.State(k, n); a.Data != before[n].Data {
			t.Errorf("%s: data changed", n)
		}
	}
}
