package integration

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	rolloutsclient "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned"
	rolloutshash "github.com/argoproj/argo-rollouts/utils/hash"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/plugin/cmd"
	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// The ownership core's rules against the real apiserver (issue: one core for every mode).

// TestLegacyEntryUntouched: the original tool's controller: true reference to the target is
// kept field by field, and the run changes nothing (same resourceVersion).
func TestLegacyEntryUntouched(t *testing.T) {
	c := sharedCluster(t)
	e := NewEnv(t, c)
	cfg := ControllerIdentity(t, c, e.NS, "rbac-step-plugin.yaml")
	ro := e.Rollout("web")
	rs := e.ReplicaSet(ro, "cur111", PodSpec([]string{"cfg"}, nil))
	yes := true
	legacy := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: &yes, BlockOwnerDeletion: &yes}
	before := e.ConfigMap("cfg", legacy)
	MustSucceed(t, Run(t, NewStep(cfg), ro, "cur111", map[string]any{"configMaps": []string{"cfg"}}))
	after, err := e.Admin.CoreV1().ConfigMaps(e.NS).Get(Ctx(t), "cfg", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !apiequality.Semantic.DeepEqual(after.OwnerReferences, before.OwnerReferences) {
		t.Errorf("owner references changed:\n before %+v\n after  %+v", before.OwnerReferences, after.OwnerReferences)
	}
	if after.ResourceVersion != before.ResourceVersion {
		t.Errorf("resourceVersion %s → %s: the run rewrote the object", before.ResourceVersion, after.ResourceVersion)
	}
}

// TestStaleListAgainstAPIServer: the list names only an older revision's objects: Failed,
// nothing written, history included.
func TestStaleListAgainstAPIServer(t *testing.T) {
	c := sharedCluster(t)
	e := NewEnv(t, c)
	cfg := ControllerIdentity(t, c, e.NS, "rbac-step-plugin.yaml")
	ro := e.Rollout("web")
	e.ReplicaSet(ro, "old111", PodSpec([]string{"cfg-old"}, nil))
	time.Sleep(1100 * time.Millisecond) // creation timestamps have a resolution of one second
	e.ReplicaSet(ro, "cur222", PodSpec([]string{"cfg-new"}, nil))
	e.ConfigMap("cfg-old")
	e.ConfigMap("cfg-new")
	_, rv, _ := e.OwnerUIDs("cm", "cfg-old")
	res := Run(t, NewStep(cfg), ro, "cur222", map[string]any{"configMaps": []string{"cfg-old"}, "discover": map[string]any{}})
	if res.Phase != types.PhaseFailed || !strings.Contains(res.Message, "the list is stale") || !strings.Contains(res.Message, "ConfigMap cfg-old (used by web-old111)") {
		t.Fatalf("%s: %s", res.Phase, res.Message)
	}
	for _, n := range []string{"cfg-old", "cfg-new"} {
		if uids, rv2, _ := e.OwnerUIDs("cm", n); len(uids) != 0 || (n == "cfg-old" && rv2 != rv) {
			t.Errorf("a failed run wrote %s: %v", n, uids)
		}
	}
}

// TestNoOwnerBeingDeleted: a ReplicaSet held by a finalizer after its deletion has a
// deletionTimestamp; a label added now to an object it and the new ReplicaSet use must not make
// it an owner (the object would go with it), and the object survives its collection.
func TestNoOwnerBeingDeleted(t *testing.T) {
	c := sharedCluster(t)
	e := NewEnv(t, c)
	cfg := ControllerIdentity(t, c, e.NS, "rbac-step-plugin.yaml")
	ro := e.Rollout("web")
	old := e.ReplicaSetWith(ro, "old111", corev1.PodTemplateSpec{Spec: PodSpec([]string{"shared"}, nil)}, []string{"example.com/hold"})
	e.DeleteRS(old)
	cur := e.ReplicaSet(ro, "cur222", PodSpec([]string{"shared"}, nil))
	e.ConfigMap("shared") // labelled while the old ReplicaSet is being deleted
	MustSucceed(t, Run(t, NewStep(cfg), ro, "cur222", map[string]any{"configMaps": []string{"shared"}, "discover": map[string]any{}}))
	uids, _, _ := e.OwnerUIDs("cm", "shared")
	if len(uids) != 1 || !uids[string(cur.UID)] {
		t.Fatalf("owners %v, want only the live ReplicaSet %s", uids, cur.UID)
	}
	// Release the old ReplicaSet: it goes, the object stays with its live owner.
	if _, err := e.Admin.AppsV1().ReplicaSets(e.NS).Patch(Ctx(t), old.Name, k8stypes.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	e.StillThere("cm", "shared", 3*time.Second)
}

// TestCredentialsNotAttached: an image pull secret and a CSI nodePublishSecretRef listed in the
// step are left alone unless opted in.
func TestCredentialsNotAttached(t *testing.T) {
	c := sharedCluster(t)
	e := NewEnv(t, c)
	cfg := ControllerIdentity(t, c, e.NS, "rbac-step-plugin.yaml")
	ro := e.Rollout("web")
	spec := PodSpec([]string{"cfg"}, nil)
	spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "regcred"}}
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "csi", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "secrets-store.csi.k8s.io", NodePublishSecretRef: &corev1.LocalObjectReference{Name: "csi-cred"}}}})
	e.ReplicaSet(ro, "cur111", spec)
	e.ConfigMap("cfg")
	e.Secret("regcred")
	e.Secret("csi-cred")
	res := Run(t, NewStep(cfg), ro, "cur111", map[string]any{"configMaps": []string{"cfg"}, "secrets": []string{"regcred", "csi-cred"}})
	MustSucceed(t, res)
	if !strings.Contains(res.Message, "skipped Secret regcred") || !strings.Contains(res.Message, "skipped Secret csi-cred") || !strings.Contains(res.Message, "credential") {
		t.Errorf("message %q", res.Message)
	}
	for _, n := range []string{"regcred", "csi-cred"} {
		if uids, _, _ := e.OwnerUIDs("secret", n); len(uids) != 0 {
			t.Errorf("credential %s got owners %v", n, uids)
		}
	}
	if uids, _, _ := e.OwnerUIDs("cm", "cfg"); len(uids) != 1 {
		t.Errorf("cfg owners %v", uids)
	}
}

// TestRequireOptInAgainstConfusedDeputy: a Rollout editor who may not delete a ConfigMap points
// the template and the step at it. Without the policy the step (the controller's identity)
// makes it a dependent and the garbage collector deletes it with the ReplicaSet: the threat.
// With --require-opt-in the step fails, names the label, and writes nothing.
func TestRequireOptInAgainstConfusedDeputy(t *testing.T) {
	c := sharedCluster(t)
	e := NewEnv(t, c)
	cfg := ControllerIdentity(t, c, e.NS, "rbac-step-plugin.yaml")
	editorRules := []rbacv1.PolicyRule{{APIGroups: []string{"argoproj.io"}, Resources: []string{"rollouts"}, Verbs: []string{"get", "update", "patch"}}}
	editor := c.ServiceAccountConfig(t, e.NS, "rollout-editor", editorRules, nil)
	c.WaitForRBAC(t, "system:serviceaccount:"+e.NS+":rollout-editor", e.NS, editorRules)
	edit, err := kubernetes.NewForConfig(editor)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"precious", "precious-2"} {
		if _, err := e.Admin.CoreV1().ConfigMaps(e.NS).Create(Ctx(t), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := edit.CoreV1().ConfigMaps(e.NS).Delete(Ctx(t), "precious", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the editor must not be able to delete the ConfigMap: %v", err)
	}
	e.Rollout("web")
	// The editor's change: the template mounts the ConfigMaps, the step lists them.
	rolloutsAsEditor := RolloutsClient(t, editor)
	ro, err := rolloutsAsEditor.ArgoprojV1alpha1().Rollouts(e.NS).Get(Ctx(t), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ro.Spec.Template.Spec = PodSpec([]string{"precious", "precious-2"}, nil)
	if ro, err = rolloutsAsEditor.ArgoprojV1alpha1().Rollouts(e.NS).Update(Ctx(t), ro, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("the editor updates the Rollout: %v", err)
	}
	rs := e.ReplicaSetOf(ro) // the controller creates the ReplicaSet
	config := map[string]any{"configMaps": []string{"precious", "precious-2"}}

	// With the policy: Failed, the label named, nothing written.
	guarded := NewStep(cfg)
	guarded.Policy = plugin.Policy{RequireOptIn: true}
	res := Run(t, guarded, ro, rs.Labels[plugin.PodTemplateHashLabel], config)
	if res.Phase != types.PhaseFailed || !strings.Contains(res.Message, "--require-opt-in") || !strings.Contains(res.Message, "configmap-attacher/revisioned=true") {
		t.Fatalf("with the policy: %s: %s", res.Phase, res.Message)
	}
	for _, n := range []string{"precious", "precious-2"} {
		if uids, _, _ := e.OwnerUIDs("cm", n); len(uids) != 0 {
			t.Errorf("%s got owners under the policy: %v", n, uids)
		}
	}
	// Without it (the planted check that the threat is real): attached, then collected with
	// the ReplicaSet, although the editor could not delete it.
	MustSucceed(t, Run(t, NewStep(cfg), ro, rs.Labels[plugin.PodTemplateHashLabel], map[string]any{"configMaps": []string{"precious"}}))
	e.DeleteRS(rs)
	e.WaitGone("cm", "precious")
	e.StillThere("cm", "precious-2", 0)
}

// TestMetadataOnlyRequests: every ConfigMap and Secret request (the discovery LIST, the dry
// run's GET, the PATCH) asks for PartialObjectMetadata, so no data enters the process.
func TestMetadataOnlyRequests(t *testing.T) {
	c := sharedCluster(t)
	e := NewEnv(t, c)
	cfg := rest.CopyConfig(ControllerIdentity(t, c, e.NS, "rbac-step-plugin.yaml"))
	var mu sync.Mutex
	seen := map[string][]string{} // "METHOD resource" → Accept headers
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return RoundTrip(func(r *http.Request) (*http.Response, error) {
			for _, res := range []string{"/configmaps", "/secrets"} {
				if strings.Contains(r.URL.Path, res) {
					mu.Lock()
					seen[r.Method+" "+res[1:]] = append(seen[r.Method+" "+res[1:]], r.Header.Get("Accept"))
					mu.Unlock()
				}
			}
			return rt.RoundTrip(r)
		})
	})
	ro := e.Rollout("web")
	e.ReplicaSet(ro, "cur111", PodSpec([]string{"cfg"}, []string{"sec"}))
	e.ConfigMap("cfg")
	s := e.Secret("sec")
	s.Labels = map[string]string{plugin.OptInLabel: "true"}
	if _, err := e.Admin.CoreV1().Secrets(e.NS).Update(Ctx(t), s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	MustSucceed(t, Run(t, NewStep(cfg), ro, "cur111", map[string]any{"configMaps": []string{"cfg"}, "dryRun": true, "discover": map[string]any{}}))
	MustSucceed(t, Run(t, NewStep(cfg), ro, "cur111", map[string]any{"configMaps": []string{"cfg"}, "discover": map[string]any{}}))
	var kinds []string
	for k, accepts := range seen {
		kinds = append(kinds, k)
		for _, a := range accepts {
			if !strings.Contains(a, "as=PartialObjectMetadata") {
				t.Errorf("%s asked for %q: the object (and its data) would be sent", k, a)
			}
		}
	}
	// GET covers the dry run's read and the discovery LISTs (both GET on the wire).
	for _, k := range []string{"GET configmaps", "GET secrets", "PATCH configmaps", "PATCH secrets"} {
		if len(seen[k]) == 0 {
			t.Errorf("no %s request seen (saw %v): the check would pass by accident", k, kinds)
		}
	}
}

func RolloutsClient(t *testing.T, cfg *rest.Config) rolloutsclient.Interface {
	t.Helper()
	rc, err := rolloutsclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

// TestCommandLineStaleStatusImageOnly: the controller recorded observedGeneration for a new
// spec but could not create its ReplicaSet (status.currentPodHash still names the previous
// one, as after FailedRSCreate); the change is image-only, so the previous ReplicaSet uses the
// same config. The command line must wait for the new ReplicaSet, not attach to the old one.
func TestCommandLineStaleStatusImageOnly(t *testing.T) {
	c := sharedCluster(t)
	e := NewEnv(t, c)
	ro := e.Rollout("web")
	ro.Spec.Template.Spec = PodSpec([]string{"cfg"}, nil)
	ro, err := e.Rollouts.ArgoprojV1alpha1().Rollouts(e.NS).Update(Ctx(t), ro, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	old := e.ReplicaSetOf(ro)
	e.ConfigMap("cfg")
	// Image-only change; the controller observes it but its ReplicaSet create is denied.
	ro.Spec.Template.Spec.Containers[0].Image = "nginx:2"
	if ro, err = e.Rollouts.ArgoprojV1alpha1().Rollouts(e.NS).Update(Ctx(t), ro, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ro.Status.ObservedGeneration = strconv.FormatInt(ro.Generation, 10)
	ro.Status.CurrentPodHash = old.Labels[plugin.PodTemplateHashLabel]
	if ro, err = e.Rollouts.ArgoprojV1alpha1().Rollouts(e.NS).UpdateStatus(Ctx(t), ro, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	run := StartCLI("-rollout", "web", "-namespace", e.NS, "-configmaps", "cfg", "-kubeconfig", JobKubeconfig(t, c, e.NS), "-timeout", "60s")
	time.Sleep(2 * time.Second)
	run.Running(t, "the status is stale")
	if uids, _, _ := e.OwnerUIDs("cm", "cfg"); len(uids) != 0 {
		t.Fatalf("attached to the previous ReplicaSet: %v", uids)
	}
	if !strings.Contains(run.stderr.String(), "to create the ReplicaSet of the current pod template") {
		t.Errorf("the wait is not explained: %s", run.stderr.String())
	}
	// The quota is lifted: the controller creates the new ReplicaSet.
	ro.Status.CurrentPodHash = rolloutshash.ComputePodTemplateHash(&ro.Spec.Template, nil)
	newRS := e.ReplicaSetOf(ro)
	if code := run.ExitCode(t); code != 0 {
		t.Fatalf("exit %d: %s", code, run.stderr.String())
	}
	uids, _, _ := e.OwnerUIDs("cm", "cfg")
	if !uids[string(newRS.UID)] {
		t.Errorf("owners %v lack the new ReplicaSet %s", uids, newRS.UID)
	}
	if !strings.Contains(run.stdout.String(), "to ReplicaSet "+newRS.Name) {
		t.Errorf("stdout %q", run.stdout.String())
	}
}

// TestCommandLineDecidesAtOnce: once the ReplicaSet of the current spec exists, an
// unreferenced name fails at once (not after -timeout), and so does InvalidSpec=True.
func TestCommandLineDecidesAtOnce(t *testing.T) {
	c := sharedCluster(t)
	e := NewEnv(t, c)
	ro, _ := e.SettledRollout(corev1.PodTemplateSpec{Spec: PodSpec([]string{"cfg"}, nil)})
	e.ConfigMap("cfg")
	e.ConfigMap("typo")
	kubeconfig := JobKubeconfig(t, c, e.NS)
	cli := func(names string) (int, string, time.Duration) {
		var stdout, stderr cluster.SyncBuffer
		start := time.Now()
		code := (&cmd.Job{Stdout: &stdout, Stderr: &stderr, PollInterval: 200 * time.Millisecond}).Main(
			[]string{"-rollout", "web", "-namespace", e.NS, "-configmaps", names, "-kubeconfig", kubeconfig, "-timeout", "5m"})
		return code, stderr.String(), time.Since(start)
	}
	code, stderr, took := cli("cfg,typo")
	if code != cmd.ExitFail || !strings.Contains(stderr, "refusing to attach ConfigMap typo") || took > 10*time.Second {
		t.Errorf("unreferenced: exit %d after %s: %s", code, took, stderr)
	}
	if uids, _, _ := e.OwnerUIDs("cm", "cfg"); len(uids) != 0 {
		t.Errorf("a refused run wrote cfg: %v", uids)
	}
	t.Logf("unreferenced name refused in %s", took.Round(time.Millisecond))
	ro.Status.Conditions = []v1alpha1.RolloutCondition{{Type: v1alpha1.InvalidSpec, Status: corev1.ConditionTrue, Reason: "InvalidSpec",
		Message: "The Rollout \"web\" is invalid: spec.strategy.canary.steps[0]: bad", LastUpdateTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if _, err := e.Rollouts.ArgoprojV1alpha1().Rollouts(e.NS).UpdateStatus(Ctx(t), ro, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	code, stderr, took = cli("cfg")
	if code != cmd.ExitFail || !strings.Contains(stderr, "InvalidSpec=True") || !strings.Contains(stderr, "steps[0]: bad") || took > 10*time.Second {
		t.Errorf("InvalidSpec: exit %d after %s: %s", code, took, stderr)
	}
}

// TestCommandLineExpectTemplateAnnotation: with -expect-template-annotation the command line
// waits until the applied template carries the release's value (a Sync hook that started
// before the apply), then attaches.
func TestCommandLineExpectTemplateAnnotation(t *testing.T) {
	c := sharedCluster(t)
	e := NewEnv(t, c)
	ro, _ := e.SettledRollout(corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"example.com/release": "41"}},
		Spec: PodSpec([]string{"cfg-41"}, nil)})
	e.ConfigMap("cfg-41")
	e.ConfigMap("cfg-42")
	run := StartCLI("-rollout", "web", "-namespace", e.NS, "-configmaps", "cfg-42", "-expect-template-annotation", "example.com/release=42",
		"-kubeconfig", JobKubeconfig(t, c, e.NS), "-timeout", "60s")
	time.Sleep(1500 * time.Millisecond)
	run.Running(t, "release 42 is not applied yet")
	var err error
	// The sync applies release 42; the controller observes it and creates its ReplicaSet.
	ro.Spec.Template.Annotations["example.com/release"] = "42"
	ro.Spec.Template.Spec = PodSpec([]string{"cfg-42"}, nil)
	if ro, err = e.Rollouts.ArgoprojV1alpha1().Rollouts(e.NS).Update(Ctx(t), ro, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	rs := e.ReplicaSetOf(ro)
	ro.Status.ObservedGeneration = strconv.FormatInt(ro.Generation, 10)
	if _, err = e.Rollouts.ArgoprojV1alpha1().Rollouts(e.NS).UpdateStatus(Ctx(t), ro, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if code := run.ExitCode(t); code != 0 {
		t.Fatalf("exit %d: %s", code, run.stderr.String())
	}
	if uids, _, _ := e.OwnerUIDs("cm", "cfg-42"); !uids[string(rs.UID)] {
		t.Errorf("cfg-42 owners %v", uids)
	}
	if !strings.Contains(run.stderr.String(), "to carry annotation example.com/release=42") {
		t.Errorf("the wait is not logged: %s", run.stderr.String())
	}
}

// SettledRollout creates Rollout "web" with the pod template tmpl, the ReplicaSet the
// controller would create for it, and the status the controller writes once it has observed
// that generation.
func (e *Env) SettledRollout(tmpl corev1.PodTemplateSpec) (*v1alpha1.Rollout, *appsv1.ReplicaSet) {
	e.T.Helper()
	ro := e.Rollout("web")
	ro.Spec.Template.Annotations = tmpl.Annotations
	ro.Spec.Template.Spec = tmpl.Spec
	ro, err := e.Rollouts.ArgoprojV1alpha1().Rollouts(e.NS).Update(Ctx(e.T), ro, metav1.UpdateOptions{})
	if err != nil {
		e.T.Fatal(err)
	}
	rs := e.ReplicaSetOf(ro)
	ro.Status.ObservedGeneration = strconv.FormatInt(ro.Generation, 10)
	if ro, err = e.Rollouts.ArgoprojV1alpha1().Rollouts(e.NS).UpdateStatus(Ctx(e.T), ro, metav1.UpdateOptions{}); err != nil {
		e.T.Fatal(err)
	}
	return ro, rs
}

// CliRun is the command line running in the background.
type CliRun struct {
	done           chan int
	stdout, stderr cluster.SyncBuffer
}

func StartCLI(args ...string) *CliRun {
	r := &CliRun{done: make(chan int, 1)}
	go func() {
		r.done <- (&cmd.Job{Stdout: &r.stdout, Stderr: &r.stderr, PollInterval: 200 * time.Millisecond}).Main(args)
	}()
	return r
}

// ExitCode waits (bounded) for the command line to finish.
func (r *CliRun) ExitCode(t *testing.T) int {
	t.Helper()
	select {
	case code := <-r.done:
		return code
	case <-time.After(30 * time.Second):
		t.Fatalf("the command line did not finish: %s", r.stderr.String())
		return -1
	}
}

// Running fails the test if the command line has already finished.
func (r *CliRun) Running(t *testing.T, why string) {
	t.Helper()
	select {
	case code := <-r.done:
		t.Fatalf("%s, yet the command line finished (exit %d): %s %s", why, code, r.stdout.String(), r.stderr.String())
	default:
	}
}

// JobKubeconfig is the Job's identity with exactly examples/job.yaml's RBAC.
func JobKubeconfig(t *testing.T, c *cluster.Cluster, ns string) string {
	t.Helper()
	jobCfg := c.ServiceAccountConfig(t, ns, "configmap-attacher-job", nil, nil)
	c.ApplyYAMLFile(t, nil, RepoFile("examples", "job.yaml"), ns)
	c.WaitForRBAC(t, "system:serviceaccount:"+ns+":configmap-attacher-job", ns, []rbacv1.PolicyRule{
		{APIGroups: []string{"argoproj.io"}, Resources: []string{"rollouts"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"patch"}}})
	return c.WriteKubeconfig(t, jobCfg)
}
