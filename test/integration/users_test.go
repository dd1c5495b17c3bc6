package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/plugin/audit"
	"github.com/configmap-attacher/configmap-attacher/plugin/cmd"
	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// "Every user counts" against the real control plane: before an object gets an owner, every
// user of it in the namespace is known. Every live ReplicaSet whose template references it
// becomes an owner whatever controls it, except one whose controller is gone; a template
// that cannot own it (here a StatefulSet) blocks its adoption in every mode.

// ---- helpers ----------------------------------------------------------------------------

// PluginBinary is the configmap-attacher binary (cluster.PluginBinary: CMA_PLUGIN_BINARY, or
// built once per source tree).
func PluginBinary(t *testing.T) string {
	t.Helper()
	bin, err := cluster.PluginBinary()
	if err != nil {
		t.Fatalf("the plugin binary: %v", err)
	}
	return bin
}

// ControllerMode runs `configmap-attacher controller` (the real binary, examples/
// controller.yaml's identity) watching only the test's namespace, until the test ends.
func (e *Env) ControllerMode(extra ...string) *cluster.ControllerProcess {
	e.T.Helper()
	bin := PluginBinary(e.T)
	// The shared cluster has only the Rollout CRD; the controller mode is tested with the
	// Experiment CRD installed too, as Argo Rollouts installs it.
	dir, err := cluster.RolloutsModuleDir()
	if err != nil {
		e.T.Fatal(err)
	}
	if err := cluster.InstallCRDFiles(e.C, filepath.Join(dir, "manifests", "crds", "experiment-crd.yaml")); err != nil {
		e.T.Fatal(err)
	}
	idCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kc, err := cluster.ControllerModeIdentity(idCtx, e.C, e.Admin)
	if err != nil {
		e.T.Fatal(err)
	}
	logPath := filepath.Join(e.C.Dir, "controller-"+e.NS+".log")
	args := append([]string{"-kubeconfig", kc, "-leader-elect=false", "-namespaces", e.NS, "-log-level", "debug"}, extra...)
	cp, err := cluster.LaunchController(bin, e.NS, logPath, []string{"KUBECONFIG=/nonexistent"}, args...)
	if err != nil {
		e.T.Fatal(err)
	}
	e.T.Cleanup(cp.Stop)
	cluster.LogLinesOnFailure(e.T, "controller mode", logPath, cp.Log, "", 60)
	if err := cp.WaitReady(90 * time.Second); err != nil {
		e.T.Fatal(err)
	}
	return cp
}

// OwnerHistory records every ownerReferences list a ConfigMap shows on a watch: what each
// write put there, so a test can say that no write ever named some ReplicaSet.
type OwnerHistory struct {
	mu   sync.Mutex
	seen [][]metav1.OwnerReference
}

func (h *OwnerHistory) Named(uid k8stypes.UID) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, refs := range h.seen {
		for _, r := range refs {
			if r.UID == uid {
				return true
			}
		}
	}
	return false
}

func (h *OwnerHistory) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var s []string
	for _, refs := range h.seen {
		var n []string
		for _, r := range refs {
			n = append(n, r.Kind+"/"+r.Name)
		}
		s = append(s, "["+strings.Join(n, ",")+"]")
	}
	return strings.Join(s, " ")
}

// WatchOwners starts recording the ConfigMap's owner references from resourceVersion rv.
func (e *Env) WatchOwners(name, rv string) *OwnerHistory {
	e.T.Helper()
	wctx, cancel := context.WithCancel(context.Background())
	e.T.Cleanup(cancel)
	w, err := e.Admin.CoreV1().ConfigMaps(e.NS).Watch(wctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: rv})
	if err != nil {
		e.T.Fatal(err)
	}
	h := &OwnerHistory{}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			if cm, ok := ev.Object.(*corev1.ConfigMap); ok {
				h.mu.Lock()
				h.seen = append(h.seen, cm.OwnerReferences)
				h.mu.Unlock()
			}
		}
	}()
	return h
}

// ClearOwners removes every owner reference (admin), so that the next mode starts from an
// unowned object.
func (e *Env) ClearOwners(kind, name string) {
	e.T.Helper()
	patch := []byte(`{"metadata":{"ownerReferences":null}}`)
	var err error
	if kind == "secret" {
		_, err = e.Admin.CoreV1().Secrets(e.NS).Patch(Ctx(e.T), name, k8stypes.MergePatchType, patch, metav1.PatchOptions{})
	} else {
		_, err = e.Admin.CoreV1().ConfigMaps(e.NS).Patch(Ctx(e.T), name, k8stypes.MergePatchType, patch, metav1.PatchOptions{})
	}
	if err != nil {
		e.T.Fatal(err)
	}
}

// WaitOwners waits until the object's owner UIDs are exactly want.
func (e *Env) WaitOwners(kind, name string, timeout time.Duration, want ...k8stypes.UID) {
	e.T.Helper()
	c, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cluster.WaitUntil(e.T, c, 100*time.Millisecond, fmt.Sprintf("%s %s owned by exactly %v", kind, name, want), func() (bool, string) {
		uids, _, err := e.OwnerUIDs(kind, name)
		if err != nil {
			return false, err.Error()
		}
		if len(uids) != len(want) {
			return false, fmt.Sprintf("owners %v", uids)
		}
		for _, u := range want {
			if !uids[string(u)] {
				return false, fmt.Sprintf("owners %v", uids)
			}
		}
		return true, ""
	})
}

// ExactOwners fails unless the object's owner UIDs are exactly want.
func (e *Env) ExactOwners(what, kind, name string, want ...k8stypes.UID) {
	e.T.Helper()
	uids, _, err := e.OwnerUIDs(kind, name)
	if err != nil {
		e.T.Fatalf("%s: %v", what, err)
	}
	ok := len(uids) == len(want)
	for _, u := range want {
		ok = ok && uids[string(u)]
	}
	if !ok {
		e.T.Errorf("%s: %s %s owners %v, want exactly %v", what, kind, name, uids, want)
	}
}

// FreezeControllerManager stops kube-controller-manager (the garbage collector, the
// ReplicaSet and Deployment controllers) with SIGSTOP; the returned func (also run in
// cleanup) resumes it. Only this cluster's own PID is signalled.
func FreezeControllerManager(t *testing.T, c *cluster.Cluster) (resume func()) {
	t.Helper()
	pid := c.PIDs()["kube-controller-manager"]
	if pid == 0 || !cluster.PIDAlive(pid) {
		t.Fatalf("kube-controller-manager is not running (pid %d)", pid)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	resume = func() {
		once.Do(func() {
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				t.Errorf("SIGCONT kube-controller-manager: %v", err)
			}
		})
	}
	t.Cleanup(resume)
	// Confirm the stop took effect (state T in /proc/<pid>/stat).
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if i := strings.LastIndexByte(string(b), ')'); i > 0 && len(b) > i+2 && b[i+2] == 'T' {
			return resume
		}
		if time.Now().After(deadline) {
			t.Fatalf("kube-controller-manager did not stop: %s", b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func MustRS(t *testing.T, e *Env, name string) *appsv1.ReplicaSet {
	t.Helper()
	rs, err := e.Admin.AppsV1().ReplicaSets(e.NS).Get(Ctx(t), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("ReplicaSet %s: %v", name, err)
	}
	return rs
}

func AttacherFor(t *testing.T, e *Env) *plugin.Attacher {
	t.Helper()
	cl, err := plugin.ClientsForConfig(e.C.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	return &plugin.Attacher{Client: cl.Kube, Meta: cl.Meta, Log: QuietLog()}
}

func (e *Env) Candidate(name string) plugin.Candidate {
	e.T.Helper()
	cm, err := e.Admin.CoreV1().ConfigMaps(e.NS).Get(Ctx(e.T), name, metav1.GetOptions{})
	if err != nil {
		e.T.Fatal(err)
	}
	return plugin.Candidate{Object: plugin.Object{Kind: plugin.KindConfigMap, Name: name}, UID: cm.UID, Labels: cm.Labels, Owners: cm.OwnerReferences}
}

func WritesName(ws []plugin.Write, uid k8stypes.UID) bool {
	for _, w := range ws {
		for _, rs := range w.Owners {
			if rs.UID == uid {
				return true
			}
		}
	}
	return false
}

// Deployment creates Deployment name (0 replicas; kube-controller-manager's Deployment
// controller creates its ReplicaSet) and returns it with that ReplicaSet.
func (e *Env) Deployment(name string, spec corev1.PodSpec) (*appsv1.Deployment, *appsv1.ReplicaSet) {
	e.T.Helper()
	zero := int32(0)
	lbl := map[string]string{"app": name}
	d, err := e.Admin.AppsV1().Deployments(e.NS).Create(Ctx(e.T), &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{Replicas: &zero, Selector: &metav1.LabelSelector{MatchLabels: lbl},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: lbl}, Spec: spec}},
	}, metav1.CreateOptions{})
	if err != nil {
		e.T.Fatal(err)
	}
	var rs *appsv1.ReplicaSet
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cluster.WaitUntil(e.T, c, 200*time.Millisecond, "the Deployment's ReplicaSet", func() (bool, string) {
		rss, err := cluster.ControlledReplicaSets(c, e.Admin, e.NS, name, d.UID)
		if err != nil || len(rss) == 0 {
			return false, fmt.Sprintf("%d ReplicaSets (%v)", len(rss), err)
		}
		rs = &rss[0]
		return true, ""
	})
	return d, rs
}

func (e *Env) StatefulSet(name string, spec corev1.PodSpec) *appsv1.StatefulSet {
	e.T.Helper()
	zero := int32(0)
	lbl := map[string]string{"app": name}
	s, err := e.Admin.AppsV1().StatefulSets(e.NS).Create(Ctx(e.T), &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.StatefulSetSpec{Replicas: &zero, ServiceName: name, Selector: &metav1.LabelSelector{MatchLabels: lbl},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: lbl}, Spec: spec}},
	}, metav1.CreateOptions{})
	if err != nil {
		e.T.Fatal(err)
	}
	return s
}

// JobUsersKubeconfig is the Job's identity with exactly examples/job.yaml's RBAC, once the
// authorizer grants the lists of the namespace's users too (jobKubeconfig waits only for get
// on rollouts and patch on configmaps).
func JobUsersKubeconfig(t *testing.T, c *cluster.Cluster, ns string) string {
	t.Helper()
	kc := JobKubeconfig(t, c, ns)
	c.WaitForRBAC(t, "system:serviceaccount:"+ns+":configmap-attacher-job", ns, []rbacv1.PolicyRule{
		{APIGroups: []string{"apps"}, Resources: []string{"statefulsets"}, Verbs: []string{"list"}},
		{APIGroups: []string{"apps"}, Resources: []string{"daemonsets"}, Verbs: []string{"list"}},
		{APIGroups: []string{"batch"}, Resources: []string{"cronjobs"}, Verbs: []string{"list"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}},
		{APIGroups: []string{"argoproj.io"}, Resources: []string{"experiments"}, Verbs: []string{"list"}}})
	return kc
}

// RunJob runs the Job mode (the command line) to its end with the Job's example RBAC.
func RunJob(t *testing.T, kubeconfig string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr cluster.SyncBuffer
	code := (&cmd.Job{Stdout: &stdout, Stderr: &stderr, PollInterval: 200 * time.Millisecond}).Main(
		append(args, "-kubeconfig", kubeconfig, "-timeout", "60s"))
	return code, stdout.String(), stderr.String()
}

func HasString(list []string, parts ...string) bool {
	for _, s := range list {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(s, p)
		}
		if ok {
			return true
		}
	}
	return false
}

// Excerpt is the text around each mention of what in s.
func Excerpt(s, what string) string {
	var out []string
	for i := 0; i < len(s) && len(out) < 4; {
		j := strings.Index(s[i:], what)
		if j < 0 {
			break
		}
		lo, hi := max(0, i+j-150), min(len(s), i+j+250)
		out = append(out, s[lo:hi])
		i += j + len(what)
	}
	return strings.Join(out, " … ")
}

func AddedNames(fix *audit.FixResult) []string {
	var out []string
	for _, a := range fix.Added {
		out = append(out, fmt.Sprintf("%s %s ← %s", a.Kind, a.Name, strings.Join(a.ReplicaSets, ",")))
	}
	return out
}

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
	c := sharedCluster(t)
	e := NewEnv(t, c)
	cfg := ControllerIdentity(t, c, e.NS, "rbac-step-plugin.yaml")
	spec := PodSpec([]string{"web-config"}, nil)

	// The app as it was: Rollout, ReplicaSet, the ConfigMap owned by it (through the step).
	oldRO := e.Rollout("web")
	oldRS := e.ReplicaSet(oldRO, "old111", spec)
	e.ConfigMap("web-config")
	MustSucceed(t, Run(t, NewStep(cfg), oldRO, "old111", map[string]any{"configMaps": []string{"web-config"}}))
	e.ExactOwners("before the recreation", "cm", "web-config", oldRS.UID)
	e.WaitObserved(oldRS) // the ReplicaSet controller is done with it before the freeze

	// Prepare the controller mode's binary and identity before the freeze (building takes a while).
	PluginBinary(t)

	resume := FreezeControllerManager(t, c)
	bg := metav1.DeletePropagationBackground
	if err := e.Rollouts.ArgoprojV1alpha1().Rollouts(e.NS).Delete(Ctx(t), "web", metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
		t.Fatal(err)
	}
	if err := e.Admin.CoreV1().ConfigMaps(e.NS).Delete(Ctx(t), "web-config", metav1.DeleteOptions{}); err != nil {
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
	if rs := MustRS(t, e, oldRS.Name); rs.DeletionTimestamp != nil {
		t.Fatalf("the garbage collector is not held back: %s has a deletionTimestamp", rs.Name)
	}

	// a) The core directly: the namespace's users, and the ConfigMap as a candidate.
	a := AttacherFor(t, e)
	users, err := a.ReadUsage(Ctx(t), e.NS)
	if err != nil {
		t.Fatal(err)
	}
	res, err := a.Reconcile(Ctx(t), plugin.Request{Namespace: e.NS, Users: users, Candidates: []plugin.Candidate{e.Candidate("web-config")}})
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if WritesName(res.Plan.Writes, oldRS.UID) || WritesName(res.Added, oldRS.UID) {
		t.Errorf("core: the writes name the dead app's ReplicaSet %s: %+v", oldRS.Name, res.Added)
	}
	if !WritesName(res.Added, newRS.UID) {
		t.Errorf("core: the new ReplicaSet was not added: %+v", res.Added)
	}
	e.ExactOwners("core", "cm", "web-config", newRS.UID)

	// b) The step of the new Rollout, with the ConfigMap listed.
	e.ClearOwners("cm", "web-config")
	res2 := Run(t, NewStep(cfg), newRO, "new222", map[string]any{"configMaps": []string{"web-config"}})
	MustSucceed(t, res2)
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
		_, err := e.Admin.AppsV1().ReplicaSets(e.NS).Get(Ctx(t), oldRS.Name, metav1.GetOptions{})
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
// opted-in ConfigMap. In each mode (the step of the Rollout, the Job, audit -fix, the
// controller mode) both workloads' ReplicaSets become owners, so deleting one workload's
// ReplicaSet cannot collect what the other still mounts. With the old rule (only the
// workload's own ReplicaSets) the Deployment's ReplicaSet is missing.
func TestSharedAcrossRolloutAndDeployment(t *testing.T) {
	c := sharedCluster(t)
	e := NewEnv(t, c)
	cfg := ControllerIdentity(t, c, e.NS, "rbac-step-plugin.yaml")
	spec := PodSpec([]string{"shared-cfg"}, nil)
	e.ConfigMap("shared-cfg")
	ro, roRS := e.SettledRollout(corev1.PodTemplateSpec{Spec: spec})
	_, depRS := e.Deployment("api", spec)
	hash := roRS.Labels[plugin.PodTemplateHashLabel]

	// The step.
	MustSucceed(t, Run(t, NewStep(cfg), ro, hash, map[string]any{"configMaps": []string{"shared-cfg"}}))
	e.ExactOwners("step", "cm", "shared-cfg", roRS.UID, depRS.UID)

	// The Job.
	e.ClearOwners("cm", "shared-cfg")
	code, stdout, stderr := RunJob(t, JobUsersKubeconfig(t, c, e.NS), "-rollout", "web", "-namespace", e.NS, "-configmaps", "shared-cfg")
	if code != 0 {
		t.Fatalf("job: exit %d: %s %s", code, stdout, stderr)
	}
	e.ExactOwners("job", "cm", "shared-cfg", roRS.UID, depRS.UID)

	// audit -fix.
	e.ClearOwners("cm", "shared-cfg")
	code, out, aerr := RunAudit(t, &cmd.Audit{}, "-namespace", e.NS, "-kubeconfig", c.KubeconfigPath, "-fix", "-o", "json")
	rep := AuditJSON(t, out)
	if rep.Fix == nil || len(rep.Fix.Errors) != 0 {
		t.Fatalf("audit -fix: exit %d fix %+v: %s", code, rep.Fix, aerr)
	}
	t.Logf("audit -fix added %q", AddedNames(rep.Fix))
	e.ExactOwners("audit -fix", "cm", "shared-cfg", roRS.UID, depRS.UID)

	// The controller mode.
	e.ClearOwners("cm", "shared-cfg")
	e.ControllerMode()
	e.WaitOwners("cm", "shared-cfg", 30*time.Second, roRS.UID, depRS.UID)

	// Deleting the Rollout's ReplicaSet leaves the ConfigMap to the Deployment's.
	e.DeleteRS(roRS)
	e.StillThere("cm", "shared-cfg", 3*time.Second)
}

// ---- 3. shared config across a Rollout and a StatefulSet ----------------------------------

// TestStatefulSetBlocksAdoption: a Rollout "web" and a StatefulSet "cache" mount the same
// opted-in ConfigMap. An owner reference would let the garbage collector delete it under the
// StatefulSet, so: the step and the Job fail naming "StatefulSet cache" and write nothing;
// audit -fix writes nothing and reports it in fix.skipped; the controller mode writes nothing
// and says so (Warning Event OwnerReferenceBlocked, adoptions_blocked_total). Once the
// StatefulSet is gone, the same controller adopts it at once (its template cache's delete
// event requeues what it blocked; the default -resync is 10 minutes).
func TestStatefulSetBlocksAdoption(t *testing.T) {
	c := sharedCluster(t)
	e := NewEnv(t, c)
	cfg := ControllerIdentity(t, c, e.NS, "rbac-step-plugin.yaml")
	spec := PodSpec([]string{"web-config"}, nil)
	e.ConfigMap("web-config")
	ro, roRS := e.SettledRollout(corev1.PodTemplateSpec{Spec: spec})
	e.StatefulSet("cache", spec)
	hash := roRS.Labels[plugin.PodTemplateHashLabel]
	before := e.State("cm", "web-config")
	unchanged := func(mode string) {
		t.Helper()
		if a := e.State("cm", "web-config"); a.rv != before.rv || len(a.owners) != 0 {
			t.Errorf("%s wrote the ConfigMap: resourceVersion %s → %s, owners %v", mode, before.rv, a.rv, a.owners)
		}
	}
	const blocked = "ConfigMap web-config is also used by StatefulSet cache"

	// The step.
	res := Run(t, NewStep(cfg), ro, hash, map[string]any{"configMaps": []string{"web-config"}})
	if res.Phase != types.PhaseFailed || !strings.Contains(res.Message, blocked) || !strings.Contains(res.Message, "nothing was written") {
		t.Errorf("step: %s: %s", res.Phase, res.Message)
	}
	t.Logf("step: %s", res.Message)
	unchanged("the step")

	// The Job.
	code, stdout, stderr := RunJob(t, JobUsersKubeconfig(t, c, e.NS), "-rollout", "web", "-namespace", e.NS, "-configmaps", "web-config")
	if code != cmd.ExitFail || !strings.Contains(stderr, blocked) || !strings.Contains(stderr, "nothing was written") {
		t.Errorf("job: exit %d: stdout %q stderr %q", code, stdout, stderr)
	}
	unchanged("the Job")

	// audit -fix.
	_, out, aerr := RunAudit(t, &cmd.Audit{}, "-namespace", e.NS, "-kubeconfig", c.KubeconfigPath, "-fix", "-o", "json")
	rep := AuditJSON(t, out)
	if rep.Fix == nil {
		t.Fatalf("audit -fix: no fix result: %s", aerr)
	}
	if len(rep.Fix.Added) != 0 || !HasString(rep.Fix.Skipped, blocked) {
		t.Errorf("audit -fix: added %q skipped %q errors %q", AddedNames(rep.Fix), rep.Fix.Skipped, rep.Fix.Errors)
	}
	unchanged("audit -fix")

	// The controller mode: ready, then a few seconds; the block is counted and an Event says why.
	cp := e.ControllerMode()
	wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var metric float64
	cluster.WaitUntil(t, wctx, 250*time.Millisecond, "the controller mode to count the blocked adoption", func() (bool, string) {
		m, err := cp.Scrape()
		if err != nil {
			return false, err.Error()
		}
		metric = cluster.SumMetric(m, "configmap_attacher_controller_adoptions_blocked_total")
		return metric >= 1, fmt.Sprintf("adoptions_blocked_total %v", metric)
	})
	var event string
	cluster.WaitUntil(t, wctx, 250*time.Millisecond, "a Warning Event OwnerReferenceBlocked", func() (bool, string) {
		l, err := e.Admin.CoreV1().Events(e.NS).List(wctx, metav1.ListOptions{FieldSelector: "reason=OwnerReferenceBlocked"})
		if err != nil {
			return false, err.Error()
		}
		for _, ev := range l.Items {
			if ev.Type == corev1.EventTypeWarning && strings.Contains(ev.Message, blocked) {
				event = ev.InvolvedObject.Kind + "/" + ev.InvolvedObject.Name + ": " + ev.Message
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events", len(l.Items))
	})
	t.Logf("controller: adoptions_blocked_total %v; event %s", metric, event)
	time.Sleep(3 * time.Second)
	unchanged("the controller mode")

	// The control: without the StatefulSet, the same controller adopts the ConfigMap.
	if err := e.Admin.AppsV1().StatefulSets(e.NS).Delete(Ctx(t), "cache", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.WaitOwners("cm", "web-config", 60*time.Second, roRS.UID)
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
	c := sharedCluster(t)

	t.Run("pull secret named in the step", func(t *testing.T) {
		e := NewEnv(t, c)
		spec := PodSpec([]string{"cfg"}, nil)
		spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "regcred"}}
		ro := e.StepRollout("web", `{"secrets":["regcred"],"configMaps":["cfg"]}`, spec)
		rs := e.ReplicaSetOf(ro)
		e.ConfigMap("cfg")
		e.Secret("regcred")
		before := e.State("secret", "regcred")

		_, out, aerr := RunAudit(t, &cmd.Audit{}, "-namespace", e.NS, "-kubeconfig", c.KubeconfigPath, "-fix", "-o", "json")
		rep := AuditJSON(t, out)
		if rep.Fix == nil || len(rep.Fix.Errors) != 0 {
			t.Fatalf("audit -fix: fix %+v: %s", rep.Fix, aerr)
		}
		t.Logf("added %q skipped %q", AddedNames(rep.Fix), rep.Fix.Skipped)
		if got := strings.Join(AddedNames(rep.Fix), "; "); got != "ConfigMap cfg ← "+rs.Name {
			t.Errorf("added %q, want only ConfigMap cfg ← %s", got, rs.Name)
		}
		// Where it is explained depends on audit's classification (fix.skipped, or a finding
		// before -fix queues it): logged, not asserted.
		if !HasString(rep.Fix.Skipped, "regcred", "credential") {
			t.Logf("fix.skipped does not name regcred; the report says: %s", Excerpt(out, "regcred"))
		}
		if a := e.State("secret", "regcred"); a.rv != before.rv || len(a.owners) != 0 {
			t.Errorf("the pull secret was written: rv %s → %s, owners %v", before.rv, a.rv, a.owners)
		}
		e.ExactOwners("audit -fix", "cm", "cfg", rs.UID)
	})

	t.Run("custom discover selector under RequireOptIn", func(t *testing.T) {
		e := NewEnv(t, c)
		ro := e.StepRollout("web", `{"discover":{"selector":{"matchLabels":{"team":"web"}}}}`, PodSpec([]string{"team-only", "team-opted"}, nil))
		rs := e.ReplicaSetOf(ro)
		for name, lbl := range map[string]map[string]string{
			"team-only":  {"team": "web"},
			"team-opted": {"team": "web", plugin.OptInLabel: "true"},
		} {
			if _, err := e.Admin.CoreV1().ConfigMaps(e.NS).Create(Ctx(t), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbl},
				Data: map[string]string{"k": name}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		before := e.State("cm", "team-only")

		// The audit command has no policy flag: the Auditor with the Policy, as the command
		// would build it.
		cl, err := plugin.ClientsForConfig(c.AdminConfig)
		if err != nil {
			t.Fatal(err)
		}
		aud := audit.New(cl, QuietLog())
		aud.Policy = plugin.Policy{RequireOptIn: true}
		rep, err := aud.Run(Ctx(t), e.NS, "", true)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Fix == nil || len(rep.Fix.Errors) != 0 {
			t.Fatalf("fix %+v", rep.Fix)
		}
		t.Logf("with RequireOptIn: added %q skipped %q", AddedNames(rep.Fix), rep.Fix.Skipped)
		if got := strings.Join(AddedNames(rep.Fix), "; "); got != "ConfigMap team-opted ← "+rs.Name {
			t.Errorf("added %q, want only ConfigMap team-opted ← %s", got, rs.Name)
		}
		if !HasString(rep.Fix.Skipped, "team-only") {
			b, _ := json.Marshal(rep)
			t.Logf("fix.skipped does not name team-only; the report says: %s", Excerpt(string(b), "team-only"))
		}
		if a := e.State("cm", "team-only"); a.rv != before.rv || len(a.owners) != 0 {
			t.Errorf("team-only was written under RequireOptIn: rv %s → %s, owners %v", before.rv, a.rv, a.owners)
		}
		e.ExactOwners("with the policy", "cm", "team-opted", rs.UID)

		// The control: without the policy the step's selector is enough.
		_, out, aerr := RunAudit(t, &cmd.Audit{}, "-namespace", e.NS, "-kubeconfig", c.KubeconfigPath, "-fix", "-o", "json")
		rep2 := AuditJSON(t, out)
		if rep2.Fix == nil || len(rep2.Fix.Errors) != 0 {
			t.Fatalf("audit -fix: fix %+v: %s", rep2.Fix, aerr)
		}
		e.ExactOwners("without the policy", "cm", "team-only", rs.UID)
	})
}

// StepRollout creates a Rollout whose canary steps run configmap-attacher with config (JSON)
// and whose template has spec; its status says the controller observed it.
func (e *Env) StepRollout(name, config string, spec corev1.PodSpec) *v1alpha1.Rollout {
	e.T.Helper()
	ro := &v1alpha1.Rollout{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.NS},
		Spec: v1alpha1.RolloutSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}}, Spec: spec},
			Strategy: v1alpha1.RolloutStrategy{Canary: &v1alpha1.CanaryStrategy{Steps: []v1alpha1.CanaryStep{
				{Plugin: &v1alpha1.PluginStep{Name: "configmap-attacher/configmap-attacher", Config: json.RawMessage(config)}},
				{Pause: &v1alpha1.RolloutPause{}},
			}}},
		},
	}
	ro, err := e.Rollouts.ArgoprojV1alpha1().Rollouts(e.NS).Create(Ctx(e.T), ro, metav1.CreateOptions{})
	if err != nil {
		e.T.Fatal(err)
	}
	return ro
}
