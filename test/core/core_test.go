package core

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/configmap-attacher/configmap-attacher/test/support/realapi"

	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/configmap-attacher/configmap-attacher/plugin"
)

// The ownership core's rules against the real apiserver (issue: one core for every mode).

// TestLegacyEntryUntouched: the original tool's controller: true reference to the target is
// kept field by field, and the run changes nothing (same resourceVersion).
func TestLegacyEntryUntouched(t *testing.T) {
	c := realapi.Shared(t)
	e := realapi.NewEnv(t, c)
	cfg := realapi.ControllerIdentity(t, c, e.NS, "rbac-step-plugin.yaml")
	ro := e.Rollout("web")
	rs := e.ReplicaSet(ro, "cur111", realapi.PodSpec([]string{"cfg"}, nil))
	yes := true
	legacy := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: &yes, BlockOwnerDeletion: &yes}
	before := e.ConfigMap("cfg", legacy)
	realapi.MustSucceed(t, realapi.Run(t, realapi.NewStep(cfg), ro, "cur111", map[string]any{"configMaps": []string{"cfg"}}))
	after, err := e.Admin.CoreV1().ConfigMaps(e.NS).Get(realapi.Ctx(t), "cfg", metav1.GetOptions{})
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
	c := realapi.Shared(t)
	e := realapi.NewEnv(t, c)
	cfg := realapi.ControllerIdentity(t, c, e.NS, "rbac-step-plugin.yaml")
	ro := e.Rollout("web")
	e.ReplicaSet(ro, "old111", realapi.PodSpec([]string{"cfg-old"}, nil))
	time.Sleep(1100 * time.Millisecond) // creation timestamps have a resolution of one second
	e.ReplicaSet(ro, "cur222", realapi.PodSpec([]string{"cfg-new"}, nil))
	e.ConfigMap("cfg-old")
	e.ConfigMap("cfg-new")
	_, rv, _ := e.OwnerUIDs("cm", "cfg-old")
	res := realapi.Run(t, realapi.NewStep(cfg), ro, "cur222", map[string]any{"configMaps": []string{"cfg-old"}, "discover": map[string]any{}})
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
	c := realapi.Shared(t)
	e := realapi.NewEnv(t, c)
	cfg := realapi.ControllerIdentity(t, c, e.NS, "rbac-step-plugin.yaml")
	ro := e.Rollout("web")
	old := e.ReplicaSetWith(ro, "old111", corev1.PodTemplateSpec{Spec: realapi.PodSpec([]string{"shared"}, nil)}, []string{"example.com/hold"})
	e.DeleteRS(old)
	cur := e.ReplicaSet(ro, "cur222", realapi.PodSpec([]string{"shared"}, nil))
	e.ConfigMap("shared") // labelled while the old ReplicaSet is being deleted
	realapi.MustSucceed(t, realapi.Run(t, realapi.NewStep(cfg), ro, "cur222", map[string]any{"configMaps": []string{"shared"}, "discover": map[string]any{}}))
	uids, _, _ := e.OwnerUIDs("cm", "shared")
	if len(uids) != 1 || !uids[string(cur.UID)] {
		t.Fatalf("owners %v, want only the live ReplicaSet %s", uids, cur.UID)
	}
	// Release the old ReplicaSet: it goes, the object stays with its live owner.
	if _, err := e.Admin.AppsV1().ReplicaSets(e.NS).Patch(realapi.Ctx(t), old.Name, k8stypes.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	e.StillThere("cm", "shared", 3*time.Second)
}

// TestCredentialsNotAttached: an image pull secret and a CSI nodePublishSecretRef listed in the
// step are left alone unless opted in.
func TestCredentialsNotAttached(t *testing.T) {
	c := realapi.Shared(t)
	e := realapi.NewEnv(t, c)
	cfg := realapi.ControllerIdentity(t, c, e.NS, "rbac-step-plugin.yaml")
	ro := e.Rollout("web")
	spec := realapi.PodSpec([]string{"cfg"}, nil)
	spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "regcred"}}
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "csi", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "secrets-store.csi.k8s.io", NodePublishSecretRef: &corev1.LocalObjectReference{Name: "csi-cred"}}}})
	e.ReplicaSet(ro, "cur111", spec)
	e.ConfigMap("cfg")
	e.Secret("regcred")
	e.Secret("csi-cred")
	res := realapi.Run(t, realapi.NewStep(cfg), ro, "cur111", map[string]any{"configMaps": []string{"cfg"}, "secrets": []string{"regcred", "csi-cred"}})
	realapi.MustSucceed(t, res)
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
	c := realapi.Shared(t)
	e := realapi.NewEnv(t, c)
	cfg := realapi.ControllerIdentity(t, c, e.NS, "rbac-step-plugin.yaml")
	editorRules := []rbacv1.PolicyRule{{APIGroups: []string{"argoproj.io"}, Resources: []string{"rollouts"}, Verbs: []string{"get", "update", "patch"}}}
	editor := c.ServiceAccountConfig(t, e.NS, "rollout-editor", editorRules, nil)
	c.WaitForRBAC(t, "system:serviceaccount:"+e.NS+":rollout-editor", e.NS, editorRules)
	edit, err := kubernetes.NewForConfig(editor)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"precious", "precious-2"} {
		if _, err := e.Admin.CoreV1().ConfigMaps(e.NS).Create(realapi.Ctx(t), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := edit.CoreV1().ConfigMaps(e.NS).Delete(realapi.Ctx(t), "precious", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the editor must not be able to delete the ConfigMap: %v", err)
	}
	e.Rollout("web")
	// The editor's change: the template mounts the ConfigMaps, the step lists them.
	rolloutsAsEditor := realapi.RolloutsClient(t, editor)
	ro, err := rolloutsAsEditor.ArgoprojV1alpha1().Rollouts(e.NS).Get(realapi.Ctx(t), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ro.Spec.Template.Spec = realapi.PodSpec([]string{"precious", "precious-2"}, nil)
	if ro, err = rolloutsAsEditor.ArgoprojV1alpha1().Rollouts(e.NS).Update(realapi.Ctx(t), ro, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("the editor updates the Rollout: %v", err)
	}
	rs := e.ReplicaSetOf(ro) // the controller creates the ReplicaSet
	config := map[string]any{"configMaps": []string{"precious", "precious-2"}}

	// With the policy: Failed, the label named, nothing written.
	guarded := realapi.NewStep(cfg)
	guarded.Policy = plugin.Policy{RequireOptIn: true}
	res := realapi.Run(t, guarded, ro, rs.Labels[plugin.PodTemplateHashLabel], config)
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
	realapi.MustSucceed(t, realapi.Run(t, realapi.NewStep(cfg), ro, rs.Labels[plugin.PodTemplateHashLabel], map[string]any{"configMaps": []string{"precious"}}))
	e.DeleteRS(rs)
	e.WaitGone("cm", "precious")
	e.StillThere("cm", "precious-2", 0)
}

// TestMetadataOnlyRequests: every ConfigMap and Secret request (the discovery LIST, the dry
// run's GET, the PATCH) asks for PartialObjectMetadata, so no data enters the process.
func TestMetadataOnlyRequests(t *testing.T) {
	c := realapi.Shared(t)
	e := realapi.NewEnv(t, c)
	cfg := rest.CopyConfig(realapi.ControllerIdentity(t, c, e.NS, "rbac-step-plugin.yaml"))
	var mu sync.Mutex
	seen := map[string][]string{} // "METHOD resource" → Accept headers
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return realapi.RoundTrip(func(r *http.Request) (*http.Response, error) {
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
	e.ReplicaSet(ro, "cur111", realapi.PodSpec([]string{"cfg"}, []string{"sec"}))
	e.ConfigMap("cfg")
	s := e.Secret("sec")
	s.Labels = map[string]string{plugin.OptInLabel: "true"}
	if _, err := e.Admin.CoreV1().Secrets(e.NS).Update(realapi.Ctx(t), s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	realapi.MustSucceed(t, realapi.Run(t, realapi.NewStep(cfg), ro, "cur111", map[string]any{"configMaps": []string{"cfg"}, "dryRun": true, "discover": map[string]any{}}))
	realapi.MustSucceed(t, realapi.Run(t, realapi.NewStep(cfg), ro, "cur111", map[string]any{"configMaps": []string{"cfg"}, "discover": map[string]any{}}))
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
