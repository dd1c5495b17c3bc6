package controllermode

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
)

// A Deployment under kube-controller-manager's own Deployment controller: each ReplicaSet of a
// rolling update owns its config, `kubectl rollout undo` finds the previous revision's config
// and its pods become Ready, and revisionHistoryLimit collects exactly the config of the
// ReplicaSets it deletes.
func TestDeploymentRollingUpdateUndoHistory(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	a := newApp(t, e, e.namespace(t), "dep")
	a.replicas = 1
	limit := int32(1)
	zero, one := intstr.FromInt32(0), intstr.FromInt32(1)
	a.createConfig(1)
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: a.name, Namespace: a.ns},
		Spec: appsv1.DeploymentSpec{Replicas: &a.replicas, RevisionHistoryLimit: &limit,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{cluster.LabelApp: a.name}},
			Template: a.template(1),
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: &zero, MaxSurge: &one}}}}
	d, err := a.kube.AppsV1().Deployments(a.ns).Create(ctxT(t), d, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rss := map[int]*appsv1.ReplicaSet{}
	waitDone := func(rev int) {
		t.Helper()
		eventually(t, 60*time.Second, fmt.Sprintf("Deployment at revision %d complete", rev), func() (bool, string) {
			cur, err := a.kube.AppsV1().Deployments(a.ns).Get(context.Background(), a.name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			rs := a.rsFor(d.UID, rev)
			st := cur.Status
			ok := rs != nil && cur.Generation == st.ObservedGeneration && st.UpdatedReplicas == a.replicas &&
				st.AvailableReplicas == a.replicas && st.Replicas == a.replicas && rs.Status.AvailableReplicas == a.replicas
			return ok, fmt.Sprintf("%+v", st)
		})
	}
	for rev := 1; rev <= 3; rev++ {
		if rev > 1 {
			a.createConfig(rev)
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				cur, err := a.kube.AppsV1().Deployments(a.ns).Get(context.Background(), a.name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				cur.Spec.Template = a.template(rev)
				_, err = a.kube.AppsV1().Deployments(a.ns).Update(context.Background(), cur, metav1.UpdateOptions{})
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		rss[rev] = a.waitRS(d.UID, rev)
		waitOwned(t, a.kube, a.ns, rss[rev], 5*time.Second, a.objects(rev)...)
		waitDone(rev)
	}
	// revisionHistoryLimit 1: revision 1's ReplicaSet is deleted, and its config with it;
	// revision 2's stays.
	waitGone(t, a.kube, a.ns, a.objects(1)...)
	waitOwned(t, a.kube, a.ns, rss[2], time.Second, a.objects(2)...)

	// kubectl rollout undo: back to revision 2, whose config is still there.
	out, err := exec.Command(filepath.Join(e.c.BinDir, "kubectl"), "--kubeconfig", e.c.KubeconfigPath, "-n", a.ns, "rollout", "undo", "deployment/"+a.name).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl rollout undo: %v\n%s", err, out)
	}
	waitDone(2)
	if rs := a.rsFor(d.UID, 2); rs.UID != rss[2].UID {
		t.Errorf("undo made a new ReplicaSet %s", rs.Name)
	}
	for _, p := range a.pods(rss[2], "pod-template-hash") {
		if !cluster.PodReady(&p) {
			t.Errorf("pod %s of the undone revision not Ready: %s", p.Name, e.kubelet.ConfigError(a.ns, p.Name))
		}
	}
	// Revision 3 is now the one old ReplicaSet kept: its config stays; nothing else went.
	time.Sleep(2 * time.Second)
	waitOwned(t, a.kube, a.ns, rss[3], time.Second, a.objects(3)...)
	waitOwned(t, a.kube, a.ns, rss[2], time.Second, a.objects(2)...)
}
