package rollouts

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
	"github.com/configmap-attacher/configmap-attacher/test/support/fixtures"
)

// TestSharedConfigRefusedWithoutController: on the real Rollouts controller, with the step
// plugin installed alone (no controller mode), revision 2 of Rollout "api" lists its
// ConfigMap, which Deployment "worker" (revisionHistoryLimit 1) mounts too. The step can keep
// true only what api's later steps see again, and nothing maintains worker's owners: it fails,
// the controller aborts the update (Degraded, the step's message in status.message), and the
// ConfigMap is not written. (test/core TestSharedConfigLivesWhileAnyUserDoes: the same step
// beside a live controller.)
func TestSharedConfigRefusedWithoutController(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	a := newApp(t, e, e.namespace(t), "api", stepsPluginFirst)
	a.createConfig(1)
	a.deploy(1)
	a.waitHealthy(1)
	a.createConfig(2)

	zero, one := int32(0), int32(1)
	lbl := map[string]string{"app": "worker"}
	ctx := testCtx(t)
	d, err := a.kube.AppsV1().Deployments(a.ns).Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "worker"},
		Spec: appsv1.DeploymentSpec{Replicas: &zero, RevisionHistoryLimit: &one, Selector: &metav1.LabelSelector{MatchLabels: lbl},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: lbl}, Spec: fixtures.RunnablePodSpec(a.cm(2), a.secret(2))}}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var worker string
	eventually(t, 60*time.Second, "worker's ReplicaSet", func() (bool, string) {
		rss, err := cluster.ControlledReplicaSets(ctx, a.kube, a.ns, d.Name, d.UID)
		if err != nil || len(rss) == 0 {
			return false, fmt.Sprintf("%d ReplicaSets (%v)", len(rss), err)
		}
		worker = rss[0].Name
		return true, ""
	})

	a.deploy(2)
	eventually(t, 90*time.Second, "the update aborted by the step", func() (bool, string) {
		ro := a.get()
		return ro.Status.Abort && ro.Status.Phase == v1alpha1.RolloutPhaseDegraded, string(ro.Status.Phase) + ": " + ro.Status.Message
	})
	ro := a.get()
	t.Logf("status.message: %s", ro.Status.Message)
	for _, want := range []string{"ConfigMap " + a.cm(2) + " is also used by ReplicaSet " + worker + " (of Deployment worker)",
		"no live configmap-attacher controller", "-controller-lease", "give each workload its own config", "nothing was written"} {
		if !strings.Contains(ro.Status.Message, want) {
			t.Errorf("status.message lacks %q: %s", want, ro.Status.Message)
		}
	}
	for _, r := range a.objects(2) {
		refs, gone, err := a.owners(r)
		if err != nil || gone || len(refs) != 0 {
			t.Errorf("%v: owners %v (gone %v, err %v), want none: the refused step wrote nothing", r, refs, gone, err)
		}
	}
}
