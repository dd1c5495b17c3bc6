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
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
)

// Every user owns: an opted-in object is a dependent of the object that stands for each of its
// users' lifetimes (a ReplicaSet, a StatefulSet's or DaemonSet's ControllerRevision, a Job, a
// bare Pod) and of an anchor for the current template of each workload that uses it, so it
// lives exactly as long as one of them. The workloads run under kube-controller-manager's own
// controllers; the fake kubelet makes their pods Ready (and runs a Job's pod to completion).

func tpl(app string, spec corev1.PodSpec) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{cluster.LabelApp: app}}, Spec: spec}
}

// A StatefulSet that starts using objects a Deployment's ReplicaSet already owns makes its
// ControllerRevision an owner too: deleting the Deployment leaves them; deleting the
// StatefulSet lets them go.
func TestStatefulSetJoinsDeploymentUser(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	a := newApp(t, e, e.namespace(t), "web")
	kube, ns, objs := a.kube, a.ns, a.objects(1)
	a.createConfig(1)
	deployment(t, kube, ns, "web", 1, nil, podSpec(a.cm(1), a.secret(1)))
	rs := waitDeployment(t, kube, ns, "web", "revision 1", usesConfigMap(a.cm(1)))
	waitOwnedBy(t, kube, ns, rsOwner(rs), 10*time.Second, objs...)
	depAnchor := waitAnchor(t, kube, ns, "Deployment/web", 10*time.Second, objs...)

	sts := createStatefulSet(t, kube, statefulSet(ns, "db", 1, nil, tpl("db", podSpec(a.cm(1), a.secret(1))),
		appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType}))
	cr := waitRevision(t, kube, ns, sts.UID, a.cm(1))
	took := waitOwnedBy(t, kube, ns, crOwner(cr), 10*time.Second, objs...)
	t.Logf("the StatefulSet's revision %s owns them after %v", cr.Name, took.Round(time.Millisecond))
	stsAnchor := waitAnchor(t, kube, ns, "StatefulSet/db", 10*time.Second, objs...)
	waitPods(t, kube, ns, "db", "StatefulSet db's pod Ready", allAt(1, cr.Name))

	if err := kube.AppsV1().Deployments(ns).Delete(ctxT(t), "web", deleteWith(background)); err != nil {
		t.Fatal(err)
	}
	waitReplicaSetsGone(t, kube, ns, 60*time.Second, map[types.UID]string{rs.UID: rs.Name})
	took = waitAnchorGone(t, kube, ns, depAnchor, anchorGrace+30*time.Second, "its Deployment is gone")
	t.Logf("the Deployment's anchor deleted %v after its ReplicaSet", took.Round(time.Millisecond))
	stillThere(t, kube, ns, anchorGrace+3*time.Second, "StatefulSet db uses them", []owner{crOwner(cr), crOwner(stsAnchor)}, objs...)

	if err := kube.AppsV1().StatefulSets(ns).Delete(ctxT(t), "db", deleteWith(background)); err != nil {
		t.Fatal(err)
	}
	waitGone(t, kube, ns, objs...)
}

// A CronJob's current jobTemplate keeps its objects through an anchor; a Job made from it
// (kubectl create job --from=cronjob/…) owns them; a new jobTemplate moves the anchor to the
// new objects, and the old ones live exactly as long as the Job.
func TestCronJobAnchorAndJob(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	a := newApp(t, e, e.namespace(t), "nightly")
	kube, ns := a.kube, a.ns
	a.createConfig(1)
	a.createConfig(2)
	cj := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: ns},
		Spec: batchv1.CronJobSpec{Schedule: "0 0 1 1 *", JobTemplate: batchv1.JobTemplateSpec{
			Spec: batchv1.JobSpec{Template: tpl("nightly", runOnce(a.cm(1), a.secret(1)))}}}}
	if _, err := kube.BatchV1().CronJobs(ns).Create(ctxT(t), cj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	anchor1 := waitAnchor(t, kube, ns, "CronJob/nightly", 15*time.Second, a.objects(1)...)

	out, err := exec.Command(filepath.Join(e.c.BinDir, "kubectl"), "--kubeconfig", e.c.KubeconfigPath, "-n", ns,
		"create", "job", "nightly-manual", "--from=cronjob/nightly").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl create job --from: %v\n%s", err, out)
	}
	job, err := kube.BatchV1().Jobs(ns).Get(ctxT(t), "nightly-manual", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ref := metav1.GetControllerOf(job); ref == nil || ref.Kind != "CronJob" || ref.Name != "nightly" {
		t.Fatalf("the Job's controller is %v, want CronJob nightly", ref)
	}
	waitOwnedBy(t, kube, ns, jobOwner(job.Name, job.UID), 15*time.Second, a.objects(1)...)

	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := kube.BatchV1().CronJobs(ns).Get(context.Background(), "nightly", metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Spec.JobTemplate.Spec.Template = tpl("nightly", runOnce(a.cm(2), a.secret(2)))
		_, err = kube.BatchV1().CronJobs(ns).Update(context.Background(), cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	anchor2 := waitAnchor(t, kube, ns, "CronJob/nightly", 15*time.Second, a.objects(2)...)
	if anchor2.UID == anchor1.UID {
		t.Fatalf("one anchor %s for both templates", anchor1.Name)
	}
	waitAnchorGone(t, kube, ns, anchor1, 15*time.Second, "the jobTemplate moved on and the Job owns revision 1's objects")
	if as := anchors(t, kube, ns, "CronJob/nightly"); len(as) != 1 {
		t.Errorf("anchors of the CronJob: %v, want only %s", anchorNames(as), anchor2.Name)
	}
	stillThere(t, kube, ns, anchorGrace+3*time.Second, "Job nightly-manual uses them", []owner{jobOwner(job.Name, job.UID)}, a.objects(1)...)

	if err := kube.BatchV1().Jobs(ns).Delete(ctxT(t), job.Name, deleteWith(background)); err != nil {
		t.Fatal(err)
	}
	waitGone(t, kube, ns, a.objects(1)...)
	stillThere(t, kube, ns, anchorGrace+2*time.Second, "the CronJob's jobTemplate uses them", []owner{crOwner(anchor2)}, a.objects(2)...)
}

// A Pod without a controller is a user of its own: created after the objects were adopted, it
// keeps them after its Deployment is gone, until it is deleted.
func TestBarePodKeepsConfig(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	a := newApp(t, e, e.namespace(t), "web")
	kube, ns, objs := a.kube, a.ns, a.objects(1)
	a.createConfig(1)
	deployment(t, kube, ns, "web", 1, nil, podSpec(a.cm(1), a.secret(1)))
	rs := waitDeployment(t, kube, ns, "web", "revision 1", usesConfigMap(a.cm(1)))
	waitOwnedBy(t, kube, ns, rsOwner(rs), 10*time.Second, objs...)

	pod, err := kube.CoreV1().Pods(ns).Create(ctxT(t), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "debug",
		Labels: map[string]string{cluster.LabelApp: "debug"}}, Spec: podSpec(a.cm(1), a.secret(1))}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	took := waitOwnedBy(t, kube, ns, podOwner(pod), 10*time.Second, objs...)
	t.Logf("the bare Pod owns them after %v", took.Round(time.Millisecond))
	waitPods(t, kube, ns, "debug", "the bare Pod Ready", func(p []corev1.Pod) bool { return len(p) == 1 && cluster.PodReady(&p[0]) })

	if err := kube.AppsV1().Deployments(ns).Delete(ctxT(t), "web", deleteWith(background)); err != nil {
		t.Fatal(err)
	}
	waitReplicaSetsGone(t, kube, ns, 60*time.Second, map[types.UID]string{rs.UID: rs.Name})
	stillThere(t, kube, ns, anchorGrace+4*time.Second, "the bare Pod debug uses them", []owner{podOwner(pod)}, objs...)

	if err := kube.CoreV1().Pods(ns).Delete(ctxT(t), "debug", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, kube, ns, objs...)
}

// A partitioned rolling update of a StatefulSet (revisionHistoryLimit 0, so an old revision is
// deleted as soon as it is not live): each revision's objects are owned by its
// ControllerRevision and stay while a pod runs it; under OnDelete an old pod kept keeps its
// revision's objects; once no pod runs a revision, its objects go with it.
func TestStatefulSetPartitionAndOnDelete(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	a := newApp(t, e, e.namespace(t), "db")
	kube, ns := a.kube, a.ns
	for rev := 1; rev <= 3; rev++ {
		a.createConfig(rev)
	}
	zero := int32(0)
	sts := createStatefulSet(t, kube, statefulSet(ns, "db", 2, &zero, a.template(1), partition(1)))
	cr1 := waitRevision(t, kube, ns, sts.UID, a.cm(1))
	waitOwnedBy(t, kube, ns, crOwner(cr1), 15*time.Second, a.objects(1)...)
	waitStatefulSet(t, kube, ns, "db", cr1.Name)

	// Revision 2 with partition 1: db-1 moves, db-0 stays at revision 1.
	updateStatefulSet(t, kube, ns, "db", func(s *appsv1.StatefulSet) { s.Spec.Template = a.template(2) })
	cr2 := waitRevision(t, kube, ns, sts.UID, a.cm(2))
	took := waitOwnedBy(t, kube, ns, crOwner(cr2), 15*time.Second, a.objects(2)...)
	t.Logf("revision 2's objects owned by %s after %v", cr2.Name, took.Round(time.Millisecond))
	waitPods(t, kube, ns, "db", "db-1 at revision 2, db-0 at revision 1", podsAt(map[string]string{"db-0": cr1.Name, "db-1": cr2.Name}))
	stillThere(t, kube, ns, anchorGrace+3*time.Second, "pod db-0 runs revision 1", []owner{crOwner(cr1)}, a.objects(1)...)

	// Partition 0: db-0 moves too; revision 1 is no longer live and is deleted, its objects with it.
	updateStatefulSet(t, kube, ns, "db", func(s *appsv1.StatefulSet) { s.Spec.UpdateStrategy = partition(0) })
	waitStatefulSet(t, kube, ns, "db", cr2.Name)
	waitGone(t, kube, ns, a.objects(1)...)

	// OnDelete with revision 3: only a deleted pod moves; db-0 kept at revision 2 keeps its objects.
	updateStatefulSet(t, kube, ns, "db", func(s *appsv1.StatefulSet) {
		s.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}
		s.Spec.Template = a.template(3)
	})
	cr3 := waitRevision(t, kube, ns, sts.UID, a.cm(3))
	waitOwnedBy(t, kube, ns, crOwner(cr3), 15*time.Second, a.objects(3)...)
	if err := kube.CoreV1().Pods(ns).Delete(ctxT(t), "db-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPods(t, kube, ns, "db", "db-1 recreated at revision 3, db-0 kept at revision 2", podsAt(map[string]string{"db-0": cr2.Name, "db-1": cr3.Name}))
	stillThere(t, kube, ns, anchorGrace+3*time.Second, "pod db-0 runs revision 2 (OnDelete)", []owner{crOwner(cr2)}, a.objects(2)...)

	// db-0 deleted too, then back to RollingUpdate: the current revision becomes 3, revision 2
	// is deleted, and its objects with it.
	if err := kube.CoreV1().Pods(ns).Delete(ctxT(t), "db-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPods(t, kube, ns, "db", "both pods at revision 3", podsAt(map[string]string{"db-0": cr3.Name, "db-1": cr3.Name}))
	updateStatefulSet(t, kube, ns, "db", func(s *appsv1.StatefulSet) {
		s.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType}
	})
	waitStatefulSet(t, kube, ns, "db", cr3.Name)
	waitGone(t, kube, ns, a.objects(2)...)
	stillThere(t, kube, ns, 2*time.Second, "revision 3 is current", []owner{crOwner(cr3)}, a.objects(3)...)
}

// `kubectl rollout undo` of a StatefulSet re-uses the earlier ControllerRevision (same UID),
// which still owns its objects; `kubectl delete --cascade=orphan` and a re-create (the
// revisions adopted again) keep them.
func TestStatefulSetUndoAndOrphanRecreate(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	a := newApp(t, e, e.namespace(t), "db")
	kube, ns := a.kube, a.ns
	a.createConfig(1)
	a.createConfig(2)
	rolling := appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType}
	sts := createStatefulSet(t, kube, statefulSet(ns, "db", 1, nil, a.template(1), rolling))
	cr1 := waitRevision(t, kube, ns, sts.UID, a.cm(1))
	waitOwnedBy(t, kube, ns, crOwner(cr1), 15*time.Second, a.objects(1)...)
	waitStatefulSet(t, kube, ns, "db", cr1.Name)
	updateStatefulSet(t, kube, ns, "db", func(s *appsv1.StatefulSet) { s.Spec.Template = a.template(2) })
	cr2 := waitRevision(t, kube, ns, sts.UID, a.cm(2))
	waitOwnedBy(t, kube, ns, crOwner(cr2), 15*time.Second, a.objects(2)...)
	waitStatefulSet(t, kube, ns, "db", cr2.Name)

	// Undo: revision 1's template again.
	updateStatefulSet(t, kube, ns, "db", func(s *appsv1.StatefulSet) { s.Spec.Template = a.template(1) })
	waitStatefulSet(t, kube, ns, "db", cr1.Name)
	if cur := getRevision(t, kube, ns, cr1.Name); cur == nil || cur.UID != cr1.UID {
		t.Fatalf("undo did not re-use revision %s (UID %s): %v", cr1.Name, cr1.UID, cur)
	}
	waitOwnedBy(t, kube, ns, crOwner(cr1), 5*time.Second, a.objects(1)...)
	waitAnchor(t, kube, ns, "StatefulSet/db", 15*time.Second, a.objects(1)...)
	waitPods(t, kube, ns, "db", "the undone revision's pod Ready", allAt(1, cr1.Name))

	// Orphan delete, then re-create: the revisions are adopted again, the objects survive.
	if err := kube.AppsV1().StatefulSets(ns).Delete(ctxT(t), "db", deleteWith(orphan)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "StatefulSet db deleted (orphan)", func() (bool, string) {
		_, err := kube.AppsV1().StatefulSets(ns).Get(context.Background(), "db", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	for _, cr := range []*appsv1.ControllerRevision{cr1, cr2} {
		if cur := getRevision(t, kube, ns, cr.Name); cur == nil || cur.UID != cr.UID {
			t.Fatalf("revision %s did not survive the orphan delete", cr.Name)
		}
	}
	sts2 := createStatefulSet(t, kube, statefulSet(ns, "db", 1, nil, a.template(1), rolling))
	eventually(t, 30*time.Second, "revision 1 adopted by the new StatefulSet", func() (bool, string) {
		cur := getRevision(t, kube, ns, cr1.Name)
		if cur == nil || cur.UID != cr1.UID {
			t.Fatalf("revision %s replaced", cr1.Name)
		}
		ref := metav1.GetControllerOf(cur)
		return ref != nil && ref.UID == sts2.UID, fmt.Sprintf("controller %v", ref)
	})
	waitStatefulSet(t, kube, ns, "db", cr1.Name)
	stillThere(t, kube, ns, anchorGrace+3*time.Second, "the re-created StatefulSet uses them", []owner{crOwner(cr1)}, a.objects(1)...)
	waitOwnedBy(t, kube, ns, crOwner(cr2), time.Second, a.objects(2)...)
	waitAnchor(t, kube, ns, "StatefulSet/db", 15*time.Second, a.objects(1)...)
}

// A DaemonSet's rolling update: each revision's objects are owned by its ControllerRevision.
func TestDaemonSetRevisionsOwnConfig(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	a := newApp(t, e, e.namespace(t), "agent")
	kube, ns := a.kube, a.ns
	a.createConfig(1)
	a.createConfig(2)
	ds, err := kube.AppsV1().DaemonSets(ns).Create(ctxT(t), &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: ns},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{cluster.LabelApp: "agent"}},
			Template: a.template(1)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cr1 := waitRevision(t, kube, ns, ds.UID, a.cm(1))
	waitOwnedBy(t, kube, ns, crOwner(cr1), 15*time.Second, a.objects(1)...)
	waitPods(t, kube, ns, "agent", "the DaemonSet's pod Ready at revision 1", allAt(1, cr1.Labels[appsv1.ControllerRevisionHashLabelKey]))

	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := kube.AppsV1().DaemonSets(ns).Get(context.Background(), "agent", metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Spec.Template = a.template(2)
		_, err = kube.AppsV1().DaemonSets(ns).Update(context.Background(), cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	cr2 := waitRevision(t, kube, ns, ds.UID, a.cm(2))
	took := waitOwnedBy(t, kube, ns, crOwner(cr2), 15*time.Second, a.objects(2)...)
	t.Logf("revision 2's objects owned by %s after %v", cr2.Name, took.Round(time.Millisecond))
	waitPods(t, kube, ns, "agent", "the DaemonSet's pod Ready at revision 2", allAt(1, cr2.Labels[appsv1.ControllerRevisionHashLabelKey]))
	waitAnchor(t, kube, ns, "DaemonSet/agent", 15*time.Second, a.objects(2)...)
	stillThere(t, kube, ns, 2*time.Second, "revision 1 is in the DaemonSet's history", []owner{crOwner(cr1)}, a.objects(1)...)
}

// A Job with ttlSecondsAfterFinished owns its objects; once it has completed and the TTL
// controller has deleted it, they are collected.
func TestJobTTLCollectsConfig(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	a := newApp(t, e, e.namespace(t), "batch")
	kube, ns, objs := a.kube, a.ns, a.objects(1)
	a.createConfig(1)
	const image = "registry.invalid/everyuser-done"
	e.kubelet.RunImage(image, cluster.PodRunner{Binary: "/bin/true", LogDir: filepath.Join(e.c.Dir, "runs"),
		Kubeconfig: func(context.Context, string, string) (string, error) { return e.c.KubeconfigPath, nil }})
	spec := runOnce(a.cm(1), a.secret(1))
	spec.Containers[0].Image = image + ":1"
	ttl, backoff := int32(5), int32(0)
	job, err := kube.BatchV1().Jobs(ns).Create(ctxT(t), &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "batch", Namespace: ns},
		Spec: batchv1.JobSpec{TTLSecondsAfterFinished: &ttl, BackoffLimit: &backoff, Template: tpl("batch", spec)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	took := waitOwnedBy(t, kube, ns, jobOwner(job.Name, job.UID), 10*time.Second, objs...)
	t.Logf("the Job owns them after %v", took.Round(time.Millisecond))
	eventually(t, 60*time.Second, "the Job completed", func() (bool, string) {
		j, err := kube.BatchV1().Jobs(ns).Get(context.Background(), job.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		if err != nil {
			return false, err.Error()
		}
		for _, c := range j.Status.Conditions {
			if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", j.Status)
	})
	eventually(t, 60*time.Second, "the Job deleted by its TTL", func() (bool, string) {
		_, err := kube.BatchV1().Jobs(ns).Get(context.Background(), job.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	waitGone(t, kube, ns, objs...)
}

// Delete and re-apply with the config unchanged (20 Deployments, each with its own
// ConfigMap): the anchor, already an owner before the delete, keeps every ConfigMap while the
// garbage collector deletes the old ReplicaSets, with the controller running and with it
// stopped across the delete; deleted for good, each ConfigMap goes after the anchor grace.
// The test runs its own controller (a selector of its own), which it stops and starts.
func TestDeleteAndReapplyKeepsConfig(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	ns := e.namespace(t)
	kube := e.c.Client(t)
	l := map[string]string{"test/reapply": ns} // the shared controller ignores these objects
	args := append([]string{"-kubeconfig", e.kubeconfig, "-selector", "test/reapply=" + ns, "-namespaces", ns,
		"-leader-elect=false", "-log-level", "debug"}, anchorGraceArgs()...)
	procName := "reapply-" + ns
	var ctl *cluster.ControllerProcess
	start := func() {
		t.Helper()
		p, err := startController(e.c.Dir, e.bin, procName, args...)
		ctl = p
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { ctl.Stop() }) // nil-safe
	start()
	cluster.LogLinesOnFailure(t, "controller "+procName, ctl.LogPath, ctl.Log, ns, 80)

	const n = 20
	zero := int32(0)
	name := func(i int) string { return fmt.Sprintf("app-%02d", i) }
	cm := func(i int) cluster.ConfigRef { return cluster.ConfigMapRef(name(i) + "-config") }
	all := make([]cluster.ConfigRef, n)
	for i := range n {
		all[i] = cm(i)
		createConfig(t, kube, ns, cm(i).Name, "", l)
	}
	apply := func() {
		t.Helper()
		for i := range n {
			d := deploymentObject(ns, name(i), zero, nil, podSpec(cm(i).Name, ""))
			if _, err := kube.AppsV1().Deployments(ns).Create(ctxT(t), d, metav1.CreateOptions{}); err != nil {
				t.Fatalf("create Deployment %s: %v", name(i), err)
			}
		}
	}
	// owned waits until each ConfigMap is owned by its Deployment's ReplicaSet and anchor, and
	// returns the ReplicaSets' UIDs.
	owned := func() map[types.UID]string {
		t.Helper()
		rss := map[types.UID]string{}
		for i := range n {
			rs := waitDeployment(t, kube, ns, name(i), cm(i).Name, usesConfigMap(cm(i).Name))
			waitOwnedBy(t, kube, ns, rsOwner(rs), 30*time.Second, cm(i))
			waitAnchor(t, kube, ns, "Deployment/"+name(i), 30*time.Second, cm(i))
			rss[rs.UID] = rs.Name
		}
		return rss
	}
	deleteAll := func() time.Time {
		t.Helper()
		for i := range n {
			if err := kube.AppsV1().Deployments(ns).Delete(ctxT(t), name(i), deleteWith(background)); err != nil {
				t.Fatal(err)
			}
		}
		return time.Now()
	}
	apply()
	old := owned()

	// With the controller running.
	deleted := deleteAll()
	apply()
	waitReplicaSetsGone(t, kube, ns, 60*time.Second, old)
	t.Logf("running controller: the old ReplicaSets were collected %v after the delete", time.Since(deleted).Round(time.Millisecond))
	stillThere(t, kube, ns, 3*time.Second, "the re-applied Deployments use them", nil, all...)
	old = owned()

	// With the controller stopped across the delete and the re-apply.
	ctl.Stop()
	deleted = deleteAll()
	apply()
	waitReplicaSetsGone(t, kube, ns, 60*time.Second, old)
	t.Logf("stopped controller: the old ReplicaSets were collected %v after the delete", time.Since(deleted).Round(time.Millisecond))
	stillThere(t, kube, ns, 3*time.Second, "the re-applied Deployments use them (controller stopped)", nil, all...)
	start()
	owned()

	// Deleted for good: collected after the anchor grace.
	deleted = deleteAll()
	stillThere(t, kube, ns, anchorGrace/2, "the anchor grace has not passed", nil, all...)
	waitGone(t, kube, ns, all...)
	t.Logf("deleted for good: all %d ConfigMaps collected %v after the delete (grace %v)", n, time.Since(deleted).Round(time.Millisecond), anchorGrace)
}

// One object shared by two Deployments with revisionHistoryLimit 1: it stays while any
// ReplicaSet of either uses it (through `set image` past the history limit on one, the other
// moving to config of its own), and is collected once no user is left.
func TestSharedConfigHistoryLimit(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	ns := e.namespace(t)
	kube := e.c.Client(t)
	optIn := map[string]string{cluster.LabelRevisioned: "true"}
	for _, name := range []string{"common", "a-new", "b-2", "b-3"} {
		createConfig(t, kube, ns, name, "", optIn)
	}
	common := cluster.ConfigMapRef("common")
	one := int32(1)
	spec := func(cm, image string) corev1.PodSpec {
		s := podSpec(cm, "")
		s.Containers[0].Image = image
		return s
	}
	setImage := func(name, image string) {
		t.Helper()
		updateDeployment(t, kube, ns, name, func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = image })
	}
	useConfig := func(name, cm string) {
		t.Helper()
		updateDeployment(t, kube, ns, name, func(d *appsv1.Deployment) {
			d.Spec.Template.Spec = spec(cm, d.Spec.Template.Spec.Containers[0].Image)
		})
	}
	deployment(t, kube, ns, "a", 1, &one, spec("common", "registry.invalid/a:1"))
	deployment(t, kube, ns, "b", 1, &one, spec("common", "registry.invalid/b:1"))
	a1 := waitDeployment(t, kube, ns, "a", "a:1", hasImage("registry.invalid/a:1"))
	b1 := waitDeployment(t, kube, ns, "b", "b:1", hasImage("registry.invalid/b:1"))
	waitOwnedBy(t, kube, ns, rsOwner(a1), 10*time.Second, common)
	waitOwnedBy(t, kube, ns, rsOwner(b1), 10*time.Second, common)
	// Each Deployment's current template anchors it too; the anchors go as the templates move on.
	anchorA := waitAnchor(t, kube, ns, "Deployment/a", 10*time.Second, common)
	anchorB := waitAnchor(t, kube, ns, "Deployment/b", 10*time.Second, common)

	// set image on a past its history limit: a1 is deleted.
	setImage("a", "registry.invalid/a:2")
	a2 := waitDeployment(t, kube, ns, "a", "a:2", hasImage("registry.invalid/a:2"))
	waitOwnedBy(t, kube, ns, rsOwner(a2), 10*time.Second, common)
	setImage("a", "registry.invalid/a:3")
	a3 := waitDeployment(t, kube, ns, "a", "a:3", hasImage("registry.invalid/a:3"))
	waitOwnedBy(t, kube, ns, rsOwner(a3), 10*time.Second, common)
	waitReplicaSetsGone(t, kube, ns, 30*time.Second, map[types.UID]string{a1.UID: a1.Name})
	stillThere(t, kube, ns, 2*time.Second, "ReplicaSets of a and b use it", []owner{rsOwner(a2), rsOwner(a3), rsOwner(b1)}, common)

	// b moves to config of its own, twice: b1 is deleted.
	useConfig("b", "b-2")
	waitDeployment(t, kube, ns, "b", "b-2", usesConfigMap("b-2"))
	useConfig("b", "b-3")
	waitDeployment(t, kube, ns, "b", "b-3", usesConfigMap("b-3"))
	waitReplicaSetsGone(t, kube, ns, 30*time.Second, map[types.UID]string{b1.UID: b1.Name})
	waitAnchorGone(t, kube, ns, anchorB, 15*time.Second, "b's template moved on")
	stillThere(t, kube, ns, anchorGrace+time.Second, "a's ReplicaSets use it", []owner{rsOwner(a3)}, common)

	// a moves on too, then past its history limit: no ReplicaSet uses it any more.
	useConfig("a", "a-new")
	waitDeployment(t, kube, ns, "a", "a-new", usesConfigMap("a-new"))
	waitAnchorGone(t, kube, ns, anchorA, 15*time.Second, "a's template moved on")
	waitAnchor(t, kube, ns, "Deployment/a", 10*time.Second, cluster.ConfigMapRef("a-new"))
	stillThere(t, kube, ns, anchorGrace+time.Second, "a's history ReplicaSet a3 uses it", []owner{rsOwner(a3)}, common)
	setImage("a", "registry.invalid/a:4")
	waitDeployment(t, kube, ns, "a", "a:4", hasImage("registry.invalid/a:4"))
	waitReplicaSetsGone(t, kube, ns, 30*time.Second, map[types.UID]string{a2.UID: a2.Name, a3.UID: a3.Name})
	waitGone(t, kube, ns, common)
	stillThere(t, kube, ns, 2*time.Second, "the current templates use them", nil, cluster.ConfigMapRef("a-new"), cluster.ConfigMapRef("b-3"))
}

// A Pod controlled by a kind the controller does not know (example.com/v1 Widget) blocks the
// objects it uses: nothing is written to them, not even for a Deployment that shares one, and a
// Warning Event OwnerReferenceBlocked says why.
func TestUnknownControllerBlocks(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	ns := e.namespace(t)
	kube := e.c.Client(t)
	createConfig(t, kube, ns, "widget-config", "widget-secret", map[string]string{cluster.LabelRevisioned: "true"})
	objs := []cluster.ConfigRef{cluster.ConfigMapRef("widget-config"), cluster.SecretRef("widget-secret")}
	before := map[cluster.ConfigRef]string{}
	for _, r := range objs {
		before[r] = getMeta(t, kube, ns, r).ResourceVersion
	}
	yes := true
	_, err := kube.CoreV1().Pods(ns).Create(ctxT(t), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "widget-0",
		Labels: map[string]string{cluster.LabelApp: "widget"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "example.com/v1", Kind: "Widget", Name: "w",
			UID: "6f1b2c3d-0000-4000-8000-00000000abcd", Controller: &yes}}},
		Spec: podSpec("widget-config", "widget-secret")}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // the controller has seen the Pod
	// A Deployment shares the Secret: its ReplicaSet could own it, but the Widget's Pod cannot.
	deployment(t, kube, ns, "web", 1, nil, podSpec("", "widget-secret"))
	waitDeployment(t, kube, ns, "web", "its first revision", func(*corev1.PodSpec) bool { return true })
	ev := waitEvent(t, kube, ns, corev1.EventTypeWarning, "OwnerReferenceBlocked", 20*time.Second)
	t.Logf("event on %s/%s: %s", ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Message)
	stillThere(t, kube, ns, 2*time.Second, "nothing deletes them", nil, objs...)
	for _, r := range objs {
		if m := getMeta(t, kube, ns, r); m.ResourceVersion != before[r] || len(m.OwnerReferences) != 0 {
			t.Errorf("blocked %s was written: resourceVersion %s → %s, owners %v", r, before[r], m.ResourceVersion, ownerNames(m.OwnerReferences))
		}
	}
}
