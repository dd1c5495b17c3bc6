package controllermode

import (
	"context"
	"testing"
	"time"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Config applied after its ReplicaSet is adopted when it appears.
func TestConfigCreatedAfterReplicaSet(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	ns := e.namespace(t)
	kube := e.c.Client(t)
	d := holder(t, kube, ns, "late")
	rs := directRS(t, kube, d, "h1", podSpec("late-config", "late-secret"))
	time.Sleep(300 * time.Millisecond) // the ReplicaSet event has come and gone
	createConfig(t, kube, ns, "late-config", "late-secret", map[string]string{cluster.LabelRevisioned: "true"})
	took := waitOwned(t, kube, ns, rs, 2*time.Second, cluster.ConfigMapRef("late-config"), cluster.SecretRef("late-secret"))
	t.Logf("owned %v after the objects were created", took.Round(time.Millisecond))
}

// An object without the opt-in label is never written, even though a ReplicaSet uses it;
// the label added later is adopted.
func TestUnlabelledNeverTouchedThenAdopted(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	ns := e.namespace(t)
	kube := e.c.Client(t)
	createConfig(t, kube, ns, "plain", "plain", nil)
	createConfig(t, kube, ns, "off", "", map[string]string{cluster.LabelRevisioned: "false"})
	d := holder(t, kube, ns, "web")
	spec := podSpec("plain", "plain")
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "off", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "off"}}}})
	rs := directRS(t, kube, d, "h1", spec)
	before := map[string]string{}
	for _, r := range []struct{ kind, name string }{{"ConfigMap", "plain"}, {"Secret", "plain"}, {"ConfigMap", "off"}} {
		before[r.kind+"/"+r.name] = getMeta(t, kube, ns, cmOrSecret(r.kind, r.name)).ResourceVersion
	}
	// Make the controller look at them again (a full reconcile of the namespace's objects).
	time.Sleep(2 * time.Second)
	for _, r := range []struct{ kind, name string }{{"ConfigMap", "plain"}, {"Secret", "plain"}, {"ConfigMap", "off"}} {
		m := getMeta(t, kube, ns, cmOrSecret(r.kind, r.name))
		if m.ResourceVersion != before[r.kind+"/"+r.name] || len(m.OwnerReferences) != 0 {
			t.Errorf("%s/%s written: resourceVersion %s → %s, owners %v", r.kind, r.name, before[r.kind+"/"+r.name], m.ResourceVersion, ownerNames(m.OwnerReferences))
		}
	}
	// The label arrives: adopted.
	cm, err := kube.CoreV1().ConfigMaps(ns).Get(ctxT(t), "plain", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Labels = map[string]string{cluster.LabelRevisioned: "true"}
	if _, err := kube.CoreV1().ConfigMaps(ns).Update(ctxT(t), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	took := waitOwned(t, kube, ns, rs, 2*time.Second, cluster.ConfigMapRef("plain"))
	t.Logf("label added later: owned after %v", took.Round(time.Millisecond))
	if m := getMeta(t, kube, ns, cluster.SecretRef("plain")); len(m.OwnerReferences) != 0 {
		t.Errorf("the unlabelled Secret got owners %v", ownerNames(m.OwnerReferences))
	}
}

func cmOrSecret(kind, name string) cluster.ConfigRef {
	return cluster.ConfigRef{Kind: kind, Name: name}
}

// A label added to a ConfigMap while its old ReplicaSet is being deleted (foreground deletion
// held by a finalizer) and a new ReplicaSet uses it: only the new ReplicaSet becomes an owner,
// and the ConfigMap outlives the old one.
func TestLabelAddedWhileOldReplicaSetIsDeleted(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	ns := e.namespace(t)
	kube := e.c.Client(t)
	createConfig(t, kube, ns, "shared", "", nil) // not opted in yet
	d := holder(t, kube, ns, "web")
	const hold = "test.configmap-attacher/hold"
	old := directRS(t, kube, d, "old", podSpec("shared", ""), func(rs *appsv1.ReplicaSet) { rs.Finalizers = []string{hold} })
	fg := metav1.DeletePropagationForeground
	if err := kube.AppsV1().ReplicaSets(ns).Delete(ctxT(t), old.Name, metav1.DeleteOptions{PropagationPolicy: &fg}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the old ReplicaSet marked for deletion", func() (bool, string) {
		rs, err := kube.AppsV1().ReplicaSets(ns).Get(ctxT(t), old.Name, metav1.GetOptions{})
		return err == nil && rs.DeletionTimestamp != nil, ""
	})
	cur := directRS(t, kube, d, "new", podSpec("shared", ""))
	cm, err := kube.CoreV1().ConfigMaps(ns).Get(ctxT(t), "shared", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Labels = map[string]string{cluster.LabelRevisioned: "true"}
	if _, err := kube.CoreV1().ConfigMaps(ns).Update(ctxT(t), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitOwned(t, kube, ns, cur, 5*time.Second, cluster.ConfigMapRef("shared"))
	time.Sleep(500 * time.Millisecond)
	m := getMeta(t, kube, ns, cluster.ConfigMapRef("shared"))
	if len(m.OwnerReferences) != 1 {
		t.Fatalf("owners %v, want only the new ReplicaSet %s", ownerNames(m.OwnerReferences), cur.Name)
	}
	// Release the old ReplicaSet: it goes, the ConfigMap stays (its owner is the new one).
	patch := []byte(`{"metadata":{"finalizers":null}}`)
	if _, err := kube.AppsV1().ReplicaSets(ns).Patch(ctxT(t), old.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the old ReplicaSet gone", func() (bool, string) {
		_, err := kube.AppsV1().ReplicaSets(ns).Get(context.Background(), old.Name, metav1.GetOptions{})
		return err != nil, ""
	})
	time.Sleep(2 * time.Second) // give the garbage collector time to act wrongly
	if getMeta(t, kube, ns, cluster.ConfigMapRef("shared")) == nil {
		t.Fatal("the ConfigMap was collected with the old ReplicaSet although the new one uses it")
	}
}

// Several workloads share one object: one patch carries every ReplicaSet, and the object goes
// only when the last owner goes.
func TestSharedAcrossWorkloads(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	ns := e.namespace(t)
	kube := e.c.Client(t)
	createConfig(t, kube, ns, "common", "", map[string]string{cluster.LabelRevisioned: "true"})
	a := directRS(t, kube, holder(t, kube, ns, "a"), "h1", podSpec("common", ""))
	b := directRS(t, kube, holder(t, kube, ns, "b"), "h1", podSpec("common", ""))
	waitOwned(t, kube, ns, a, 5*time.Second, cluster.ConfigMapRef("common"))
	waitOwned(t, kube, ns, b, 5*time.Second, cluster.ConfigMapRef("common"))
	if err := kube.AppsV1().ReplicaSets(ns).Delete(ctxT(t), a.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	if getMeta(t, kube, ns, cluster.ConfigMapRef("common")) == nil {
		t.Fatal("collected while ReplicaSet b still owns it")
	}
	if err := kube.AppsV1().ReplicaSets(ns).Delete(ctxT(t), b.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, kube, ns, cluster.ConfigMapRef("common"))
}
