package core

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
	"github.com/configmap-attacher/configmap-attacher/test/support/realapi"
)

// TestSharedConfigLivesWhileAnyUserDoes: a Kustomize-style ConfigMap shared by the step's
// Rollout "api" and a Deployment "worker" (revisionHistoryLimit: 1), on the real control plane
// (the Deployment controller rolls worker, the garbage collector collects).
//
//  1. Step-only install (no controller): the step refuses, naming worker's ReplicaSet and the
//     fix, and writes nothing. (Before, it made worker's then-current ReplicaSet an owner, and
//     nothing ever added its later ones.)
//  2. The controller mode runs with leader election (its Lease marked with its scope), and the
//     step's identity may get that Lease: the step attaches its own ReplicaSet and leaves worker
//     to the controller, which makes each of worker's new ReplicaSets an owner as worker rolls
//     past its history limit.
//  3. The Rollout moves on (its template to other config, its ReplicaSet deleted): the
//     ConfigMap stays, worker's current ReplicaSet still uses it. Once worker is gone too (no
//     user left), the garbage collector deletes it.
func TestSharedConfigLivesWhileAnyUserDoes(t *testing.T) {
	c := realapi.Shared(t)
	e := realapi.NewEnv(t, c)
	stepCfg := realapi.ControllerIdentity(t, c, e.NS, "rbac-step-plugin.yaml")
	spec := realapi.PodSpec([]string{"app-config"}, nil)
	cm := e.ConfigMap("app-config")
	ro, roRS := e.SettledRollout(corev1.PodTemplateSpec{Spec: spec})
	hash := roRS.Labels[plugin.PodTemplateHashLabel]
	worker, workerRS := workerDeployment(t, e, spec)
	config := map[string]any{"configMaps": []string{"app-config"}}

	// 1. No controller: refused, nothing written.
	res := realapi.Run(t, realapi.NewStep(stepCfg), ro, hash, config)
	t.Logf("step-only: %s: %s", res.Phase, res.Message)
	for _, want := range []string{"ConfigMap app-config is also used by ReplicaSet " + workerRS.Name + " (of Deployment worker)",
		"no live configmap-attacher controller", "give each workload its own config", "nothing was written"} {
		if res.Phase != types.PhaseFailed || !strings.Contains(res.Message, want) {
			t.Errorf("step-only: %s, message lacks %q: %s", res.Phase, want, res.Message)
		}
	}
	if s := e.State("cm", "app-config"); s.RV != cm.ResourceVersion || len(s.Owners) != 0 {
		t.Fatalf("the step-only run wrote the ConfigMap: resourceVersion %s → %s, owners %v", cm.ResourceVersion, s.RV, s.Owners)
	}

	// 2. The controller mode with leader election (examples/controller.yaml's Lease), and the
	// step's identity bound to the chart's lease-reader Role (examples/controller.yaml).
	lease := plugin.LeaseRef{Namespace: cluster.ControllerModeNamespace, Name: "configmap-attacher"}
	cp := e.ControllerMode("-leader-elect=true", "-leader-election-namespace", lease.Namespace, "-leader-election-id", lease.Name,
		"-anchor-grace", "2s")
	bindLeaseReader(t, e, lease)
	waitLeaseLive(t, e, lease)

	res = realapi.Run(t, realapi.NewStep(stepCfg), ro, hash, config)
	t.Logf("with the controller: %s: %s", res.Phase, res.Message)
	realapi.MustSucceed(t, res)
	// The step does not read worker's ReplicaSets: the controller maintains the object.
	if !strings.Contains(res.Message, "the controller of Lease "+lease.String()+" maintains ConfigMap app-config") {
		t.Errorf("the message does not say who maintains worker's owners: %s", res.Message)
	}
	// The step's own ReplicaSet, worker's (the controller's), and worker's anchor.
	e.WaitOwnersAndAnchors("cm", "app-config", 60*time.Second, roRS.UID, workerRS.UID)

	// worker rolls three times past revisionHistoryLimit 1: each new ReplicaSet becomes an
	// owner (the controller), the old ones go.
	var current *appsv1.ReplicaSet
	for i := 1; i <= 3; i++ {
		current = rollWorker(t, e, worker, i)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		uid := current.UID
		cluster.WaitUntil(t, ctx, 100*time.Millisecond, fmt.Sprintf("worker's ReplicaSet %s an owner", current.Name), func() (bool, string) {
			uids, _, err := e.OwnerUIDs("cm", "app-config")
			if err != nil {
				return false, err.Error()
			}
			return uids[string(uid)], fmt.Sprintf("owners %v", uids)
		})
		cancel()
	}
	// The Deployment controller drops the ReplicaSets past the limit (and the garbage
	// collector nothing more: the ConfigMap has the others' owners).
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	cluster.WaitUntil(t, ctx, 200*time.Millisecond, "worker's history cut to revisionHistoryLimit 1", func() (bool, string) {
		rss := realapi.DeploymentReplicaSets(t, e, worker)
		return len(rss) <= 2, fmt.Sprintf("ReplicaSets %v", rss)
	})
	cancel()
	if _, err := e.Admin.AppsV1().ReplicaSets(e.NS).Get(realapi.Ctx(t), workerRS.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("worker's first ReplicaSet %s is still there past the history limit (err %v)", workerRS.Name, err)
	}
	e.StillThere("cm", "app-config", time.Second)

	// 3. The Rollout moves on: its template uses other config (so its anchor no longer stands
	// for app-config) and its ReplicaSet goes; the ConfigMap stays for worker.
	e.ConfigMap("app-config-2")
	moved, err := e.Rollouts.ArgoprojV1alpha1().Rollouts(e.NS).Get(realapi.Ctx(t), ro.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	moved.Spec.Template.Spec = realapi.PodSpec([]string{"app-config-2"}, nil)
	if _, err := e.Rollouts.ArgoprojV1alpha1().Rollouts(e.NS).Update(realapi.Ctx(t), moved, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.DeleteRS(roRS)
	e.StillThere("cm", "app-config", 3*time.Second)
	if uids, _, _ := e.OwnerUIDs("cm", "app-config"); !uids[string(current.UID)] {
		t.Errorf("worker's current ReplicaSet %s does not own the ConfigMap: %v", current.Name, uids)
	}
	// No user left: worker is deleted (its ReplicaSets with it, its anchor after the grace).
	bg := metav1.DeletePropagationBackground
	if err := e.Admin.AppsV1().Deployments(e.NS).Delete(realapi.Ctx(t), worker.Name, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		_, err := e.Admin.CoreV1().ConfigMaps(e.NS).Get(realapi.Ctx(t), "app-config", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			uids, _, _ := e.OwnerUIDs("cm", "app-config")
			t.Fatalf("the ConfigMap outlived its last user by 90s (owners %v, err %v)", uids, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !cp.Running() {
		t.Errorf("the controller mode exited: %s", cp.LogTail(20))
	}
}

// workerDeployment creates Deployment worker (0 replicas, revisionHistoryLimit 1) and returns
// it with the ReplicaSet the Deployment controller made.
func workerDeployment(t *testing.T, e *realapi.Env, spec corev1.PodSpec) (*appsv1.Deployment, *appsv1.ReplicaSet) {
	t.Helper()
	zero, one := int32(0), int32(1)
	lbl := map[string]string{"app": "worker"}
	d, err := e.Admin.AppsV1().Deployments(e.NS).Create(realapi.Ctx(t), &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "worker"},
		Spec: appsv1.DeploymentSpec{Replicas: &zero, RevisionHistoryLimit: &one, Selector: &metav1.LabelSelector{MatchLabels: lbl},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: lbl}, Spec: spec}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return d, waitWorkerRS(t, e, d, "1")
}

// rollWorker changes worker's template (revision i+1) and returns its new ReplicaSet.
func rollWorker(t *testing.T, e *realapi.Env, d *appsv1.Deployment, i int) *appsv1.ReplicaSet {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"example.com/release":"%d"}}}}}`, i)
	if _, err := e.Admin.AppsV1().Deployments(e.NS).Patch(realapi.Ctx(t), d.Name, k8stypes.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	return waitWorkerRS(t, e, d, fmt.Sprint(i+1))
}

// waitWorkerRS waits for the ReplicaSet of revision rev of the Deployment.
func waitWorkerRS(t *testing.T, e *realapi.Env, d *appsv1.Deployment, rev string) *appsv1.ReplicaSet {
	t.Helper()
	var rs *appsv1.ReplicaSet
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cluster.WaitUntil(t, ctx, 100*time.Millisecond, "worker's ReplicaSet of revision "+rev, func() (bool, string) {
		rss, err := cluster.ControlledReplicaSets(ctx, e.Admin, e.NS, d.Name, d.UID)
		if err != nil {
			return false, err.Error()
		}
		for i := range rss {
			if rss[i].Annotations[plugin.DeploymentRevisionAnnotation] == rev {
				rs = &rss[i]
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d ReplicaSets", len(rss))
	})
	return rs
}

// bindLeaseReader binds the step's identity (ServiceAccount argo-rollouts of the test's
// namespace) to the Role the chart renders for the step plugin to get the controller's Lease
// (examples/controller.yaml: <fullname>-lease-reader), and waits until it may.
func bindLeaseReader(t *testing.T, e *realapi.Env, lease plugin.LeaseRef) {
	t.Helper()
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "lease-reader-" + e.NS, Namespace: lease.Namespace},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: lease.Name + "-lease-reader"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "argo-rollouts", Namespace: e.NS}}}
	if _, err := e.Admin.RbacV1().RoleBindings(lease.Namespace).Create(realapi.Ctx(t), rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.Admin.RbacV1().RoleBindings(lease.Namespace).Delete(context.Background(), rb.Name, metav1.DeleteOptions{})
	})
	e.C.WaitForRBAC(t, "system:serviceaccount:"+e.NS+":argo-rollouts", lease.Namespace, []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{lease.Name}, Verbs: []string{"get"}}})
}

// waitLeaseLive waits until the controller holds its Lease with its marks and its scope (this
// namespace).
func waitLeaseLive(t *testing.T, e *realapi.Env, lease plugin.LeaseRef) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cluster.WaitUntil(t, ctx, 100*time.Millisecond, "the controller's Lease held and marked", func() (bool, string) {
		l, err := e.Admin.CoordinationV1().Leases(lease.Namespace).Get(ctx, lease.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		h := ""
		if l.Spec.HolderIdentity != nil {
			h = *l.Spec.HolderIdentity
		}
		ok := h != "" && l.Labels[plugin.ControllerLeaseLabel] == "true" && l.Annotations[plugin.LeaseNamespacesAnnotation] == e.NS
		return ok, fmt.Sprintf("holder %q labels %v annotations %v", h, l.Labels, l.Annotations)
	})
}
