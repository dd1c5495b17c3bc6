package controllermode

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// Helpers of everyuser_test.go: every kind of user of an object (ReplicaSets, the
// ControllerRevisions of StatefulSets and DaemonSets, Jobs, bare Pods, and the anchors the
// controller keeps for the current template of a workload) owns it.

// The anchor an opted-in object's workload template gets: an apps/v1 ControllerRevision the
// controller creates in the workload's namespace, without owner references.
const (
	labelAnchor        = "configmap-attacher.io/anchor"   // "true"
	annotationWorkload = "configmap-attacher.io/workload" // "<Kind>/<name>"
)

// anchorGrace is the controllers' -anchor-grace in this package: how long an anchor outlives
// its workload.
const anchorGrace = 3 * time.Second

// anchorGraceArgs is -anchor-grace for the controllers this package starts.
func anchorGraceArgs() []string { return []string{"-anchor-grace", anchorGrace.String()} }

// nodeName is the one Node of the shared cluster (Ready, untainted): DaemonSets run a pod for
// it. Nothing schedules pods onto it; the fake kubelet runs every pod.
const nodeName = "fake-node"

// --- owners ---

// owner is an owner reference the controller writes: apiVersion, kind, name and UID.
type owner struct {
	apiVersion, kind, name string
	uid                    types.UID
}

func (o owner) String() string { return o.kind + "/" + o.name }

func rsOwner(rs *appsv1.ReplicaSet) owner { return owner{"apps/v1", "ReplicaSet", rs.Name, rs.UID} }
func crOwner(cr *appsv1.ControllerRevision) owner {
	return owner{"apps/v1", "ControllerRevision", cr.Name, cr.UID}
}
func jobOwner(name string, uid types.UID) owner { return owner{"batch/v1", "Job", name, uid} }
func podOwner(p *corev1.Pod) owner              { return owner{"v1", "Pod", p.Name, p.UID} }

// hasRef reports whether refs hold o as the controller writes it: same UID, apiVersion, kind
// and name, not a controller, no blockOwnerDeletion.
func hasRef(refs []metav1.OwnerReference, o owner) bool {
	for _, r := range refs {
		if r.UID == o.uid {
			return r.APIVersion == o.apiVersion && r.Kind == o.kind && r.Name == o.name &&
				(r.Controller == nil || !*r.Controller) && r.BlockOwnerDeletion == nil
		}
	}
	return false
}

// ownersState describes the owners of objs (for a failure message).
func ownersState(t *testing.T, kube kubernetes.Interface, ns string, objs ...cluster.ConfigRef) string {
	t.Helper()
	var state []string
	for _, r := range objs {
		if m := getMeta(t, kube, ns, r); m == nil {
			state = append(state, r.String()+" gone")
		} else {
			state = append(state, fmt.Sprintf("%s owners %v", r, ownerNames(m.OwnerReferences)))
		}
	}
	return strings.Join(state, "; ")
}

// waitOwnedBy waits until every object carries o's owner reference (failing at once when one is
// deleted) and returns how long it took.
func waitOwnedBy(t *testing.T, kube kubernetes.Interface, ns string, o owner, timeout time.Duration, objs ...cluster.ConfigRef) time.Duration {
	t.Helper()
	return eventually(t, timeout, fmt.Sprintf("%v owned by %s", objs, o), func() (bool, string) {
		ok := true
		for _, r := range objs {
			m := getMeta(t, kube, ns, r)
			if m == nil {
				t.Fatalf("%s was deleted while waiting for owner %s", r, o)
			}
			ok = ok && hasRef(m.OwnerReferences, o)
		}
		return ok, ownersState(t, kube, ns, objs...)
	})
}

// stillThere checks for d that no object is deleted, and that each keeps the owners in keep.
func stillThere(t *testing.T, kube kubernetes.Interface, ns string, d time.Duration, why string, keep []owner, objs ...cluster.ConfigRef) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		for _, r := range objs {
			m := getMeta(t, kube, ns, r)
			if m == nil {
				t.Fatalf("%s was deleted although %s", r, why)
			}
			for _, o := range keep {
				if !hasRef(m.OwnerReferences, o) {
					t.Fatalf("%s lost owner %s although %s; owners %v", r, o, why, ownerNames(m.OwnerReferences))
				}
			}
		}
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// --- ControllerRevisions ---

// revisionTemplate decodes the pod template of a StatefulSet's or DaemonSet's revision
// (data: {"spec":{"template":{...,"$patch":"replace"}}}).
func revisionTemplate(t *testing.T, cr *appsv1.ControllerRevision) corev1.PodTemplateSpec {
	t.Helper()
	var d struct {
		Spec struct {
			Template corev1.PodTemplateSpec `json:"template"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(cr.Data.Raw, &d); err != nil {
		t.Fatalf("ControllerRevision %s: data: %v", cr.Name, err)
	}
	return d.Spec.Template
}

// revisionUsing returns the ControllerRevision controlled by the workload with UID uid whose
// template uses ConfigMap cm (nil if none).
func revisionUsing(t *testing.T, kube kubernetes.Interface, ns string, uid types.UID, cm string) *appsv1.ControllerRevision {
	t.Helper()
	list, err := kube.AppsV1().ControllerRevisions(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		cr := &list.Items[i]
		if ref := metav1.GetControllerOf(cr); ref == nil || ref.UID != uid {
			continue
		}
		tpl := revisionTemplate(t, cr)
		for _, r := range cluster.PodConfigRefs(&tpl.Spec) {
			if r == cluster.ConfigMapRef(cm) {
				return cr
			}
		}
	}
	return nil
}

func waitRevision(t *testing.T, kube kubernetes.Interface, ns string, uid types.UID, cm string) *appsv1.ControllerRevision {
	t.Helper()
	var cr *appsv1.ControllerRevision
	eventually(t, 60*time.Second, "a ControllerRevision using ConfigMap "+cm, func() (bool, string) {
		cr = revisionUsing(t, kube, ns, uid, cm)
		return cr != nil, ""
	})
	return cr
}

func getRevision(t *testing.T, kube kubernetes.Interface, ns, name string) *appsv1.ControllerRevision {
	t.Helper()
	cr, err := kube.AppsV1().ControllerRevisions(ns).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return cr
}

// --- anchors ---

// anchors lists the anchors of workload ("<Kind>/<name>").
func anchors(t *testing.T, kube kubernetes.Interface, ns, workload string) []appsv1.ControllerRevision {
	t.Helper()
	list, err := kube.AppsV1().ControllerRevisions(ns).List(context.Background(), metav1.ListOptions{LabelSelector: labelAnchor + "=true"})
	if err != nil {
		t.Fatal(err)
	}
	var out []appsv1.ControllerRevision
	for _, cr := range list.Items {
		if cr.Annotations[annotationWorkload] == workload {
			out = append(out, cr)
		}
	}
	return out
}

func anchorNames(as []appsv1.ControllerRevision) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.Name)
	}
	sort.Strings(out)
	return out
}

// waitAnchor waits until every object is owned by one anchor of workload ("<Kind>/<name>"),
// and returns that anchor. An anchor's one owner is its Namespace.
func waitAnchor(t *testing.T, kube kubernetes.Interface, ns, workload string, timeout time.Duration, objs ...cluster.ConfigRef) *appsv1.ControllerRevision {
	t.Helper()
	var found *appsv1.ControllerRevision
	eventually(t, timeout, fmt.Sprintf("%v owned by an anchor of %s", objs, workload), func() (bool, string) {
		as := anchors(t, kube, ns, workload)
		for i := range as {
			ok := true
			for _, r := range objs {
				m := getMeta(t, kube, ns, r)
				if m == nil {
					t.Fatalf("%s was deleted while waiting for the anchor of %s", r, workload)
				}
				ok = ok && hasRef(m.OwnerReferences, crOwner(&as[i]))
			}
			if ok {
				found = &as[i]
				return true, ""
			}
		}
		return false, fmt.Sprintf("anchors of %s: %v; %s", workload, anchorNames(as), ownersState(t, kube, ns, objs...))
	})
	// Its one owner is its Namespace, as controller: deleting the workload does not delete it,
	// and no StatefulSet or DaemonSet adopts it.
	if refs := found.OwnerReferences; len(refs) != 1 || !plugin.NamespaceController(metav1.GetControllerOfNoCopy(found), ns) {
		t.Errorf("anchor %s has owner references %v: want its Namespace alone, as controller", found.Name, ownerNames(found.OwnerReferences))
	}
	return found
}

// waitAnchorGone waits until the anchor (by UID) no longer exists.
func waitAnchorGone(t *testing.T, kube kubernetes.Interface, ns string, a *appsv1.ControllerRevision, timeout time.Duration, why string) time.Duration {
	t.Helper()
	return eventually(t, timeout, fmt.Sprintf("anchor %s deleted (%s)", a.Name, why), func() (bool, string) {
		cur := getRevision(t, kube, ns, a.Name)
		return cur == nil || cur.UID != a.UID, ""
	})
}

// --- workloads ---

var (
	background = metav1.DeletePropagationBackground
	orphan     = metav1.DeletePropagationOrphan
)

func deleteWith(p metav1.DeletionPropagation) metav1.DeleteOptions {
	return metav1.DeleteOptions{PropagationPolicy: &p}
}

// runOnce is a pod spec using cm and secret that runs to completion (restartPolicy Never).
func runOnce(cm, secret string) corev1.PodSpec {
	s := podSpec(cm, secret)
	s.RestartPolicy = corev1.RestartPolicyNever
	return s
}

// deployment creates a Deployment of replicas pods (maxSurge 1, maxUnavailable 0).
func deployment(t *testing.T, kube kubernetes.Interface, ns, name string, replicas int32, limit *int32, spec corev1.PodSpec) *appsv1.Deployment {
	t.Helper()
	d, err := kube.AppsV1().Deployments(ns).Create(ctxT(t), deploymentObject(ns, name, replicas, limit, spec), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create Deployment %s: %v", name, err)
	}
	return d
}

func deploymentObject(ns, name string, replicas int32, limit *int32, spec corev1.PodSpec) *appsv1.Deployment {
	zero, one := intstrPtr(0), intstrPtr(1)
	l := map[string]string{cluster.LabelApp: name}
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, RevisionHistoryLimit: limit,
			Selector: &metav1.LabelSelector{MatchLabels: l},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: l}, Spec: spec},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: zero, MaxSurge: one}}}}
}

func intstrPtr(n int32) *intstr.IntOrString { v := intstr.FromInt32(n); return &v }

func updateDeployment(t *testing.T, kube kubernetes.Interface, ns, name string, change func(*appsv1.Deployment)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d, err := kube.AppsV1().Deployments(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(d)
		_, err = kube.AppsV1().Deployments(ns).Update(context.Background(), d, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("update Deployment %s: %v", name, err)
	}
}

// waitDeployment waits until the Deployment's rollout is complete at the ReplicaSet whose
// template satisfies match, and returns that ReplicaSet.
func waitDeployment(t *testing.T, kube kubernetes.Interface, ns, name string, what string, match func(*corev1.PodSpec) bool) *appsv1.ReplicaSet {
	t.Helper()
	var rs *appsv1.ReplicaSet
	eventually(t, 90*time.Second, fmt.Sprintf("Deployment %s complete at %s", name, what), func() (bool, string) {
		d, err := kube.AppsV1().Deployments(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		rss, err := cluster.ControlledReplicaSets(context.Background(), kube, ns, name, d.UID)
		if err != nil {
			return false, err.Error()
		}
		rs = nil
		for i := range rss {
			if match(&rss[i].Spec.Template.Spec) {
				rs = &rss[i]
			}
		}
		st, want := d.Status, *d.Spec.Replicas
		ok := rs != nil && d.Generation == st.ObservedGeneration && st.UpdatedReplicas == want && st.AvailableReplicas == want &&
			st.Replicas == want && rs.Status.AvailableReplicas == want && *rs.Spec.Replicas == want
		return ok, fmt.Sprintf("%d ReplicaSets; status %+v", len(rss), st)
	})
	return rs
}

func usesConfigMap(cm string) func(*corev1.PodSpec) bool {
	return func(s *corev1.PodSpec) bool {
		for _, r := range cluster.PodConfigRefs(s) {
			if r == cluster.ConfigMapRef(cm) {
				return true
			}
		}
		return false
	}
}

func hasImage(image string) func(*corev1.PodSpec) bool {
	return func(s *corev1.PodSpec) bool { return len(s.Containers) > 0 && s.Containers[0].Image == image }
}

// waitReplicaSetsGone waits until none of the ReplicaSets (by UID) exists.
func waitReplicaSetsGone(t *testing.T, kube kubernetes.Interface, ns string, timeout time.Duration, uids map[types.UID]string) {
	t.Helper()
	eventually(t, timeout, fmt.Sprintf("%d ReplicaSets deleted", len(uids)), func() (bool, string) {
		list, err := kube.AppsV1().ReplicaSets(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var left []string
		for _, rs := range list.Items {
			if _, ok := uids[rs.UID]; ok {
				left = append(left, rs.Name)
			}
		}
		return len(left) == 0, fmt.Sprintf("still there: %v", left)
	})
}

// waitPods waits until the live pods labelled app=name satisfy ok (their names, revision
// labels and readiness are the state).
func waitPods(t *testing.T, kube kubernetes.Interface, ns, app, what string, ok func([]corev1.Pod) bool) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	eventually(t, 90*time.Second, what, func() (bool, string) {
		var err error
		pods, err = cluster.LivePods(context.Background(), kube, ns, labels.SelectorFromSet(map[string]string{cluster.LabelApp: app}).String())
		if err != nil {
			return false, err.Error()
		}
		var state []string
		for _, p := range pods {
			state = append(state, fmt.Sprintf("%s rev=%s ready=%v", p.Name, p.Labels[appsv1.ControllerRevisionHashLabelKey], cluster.PodReady(&p)))
		}
		sort.Strings(state)
		return ok(pods), strings.Join(state, ", ")
	})
	return pods
}

// allAt reports whether there are n pods, all Ready and labelled controller-revision-hash=rev.
func allAt(n int, rev string) func([]corev1.Pod) bool {
	return func(pods []corev1.Pod) bool {
		if len(pods) != n {
			return false
		}
		for _, p := range pods {
			if p.Labels[appsv1.ControllerRevisionHashLabelKey] != rev || !cluster.PodReady(&p) {
				return false
			}
		}
		return true
	}
}

// podsAt reports whether the pods are exactly want (name → controller-revision-hash), all Ready.
func podsAt(want map[string]string) func([]corev1.Pod) bool {
	return func(pods []corev1.Pod) bool {
		if len(pods) != len(want) {
			return false
		}
		for _, p := range pods {
			if rev, ok := want[p.Name]; !ok || p.Labels[appsv1.ControllerRevisionHashLabelKey] != rev || !cluster.PodReady(&p) {
				return false
			}
		}
		return true
	}
}

func statefulSet(ns, name string, replicas int32, limit *int32, tpl corev1.PodTemplateSpec, strategy appsv1.StatefulSetUpdateStrategy) *appsv1.StatefulSet {
	return &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.StatefulSetSpec{Replicas: &replicas, RevisionHistoryLimit: limit, ServiceName: name,
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector:            &metav1.LabelSelector{MatchLabels: map[string]string{cluster.LabelApp: name}},
			Template:            tpl, UpdateStrategy: strategy}}
}

func createStatefulSet(t *testing.T, kube kubernetes.Interface, sts *appsv1.StatefulSet) *appsv1.StatefulSet {
	t.Helper()
	sts, err := kube.AppsV1().StatefulSets(sts.Namespace).Create(ctxT(t), sts, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create StatefulSet: %v", err)
	}
	return sts
}

func updateStatefulSet(t *testing.T, kube kubernetes.Interface, ns, name string, change func(*appsv1.StatefulSet)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s, err := kube.AppsV1().StatefulSets(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(s)
		_, err = kube.AppsV1().StatefulSets(ns).Update(context.Background(), s, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("update StatefulSet %s: %v", name, err)
	}
}

func partition(p int32) appsv1.StatefulSetUpdateStrategy {
	return appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType,
		RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: &p}}
}

// waitStatefulSet waits until the StatefulSet's status says every pod runs revision rev
// (current = update = rev) and is ready.
func waitStatefulSet(t *testing.T, kube kubernetes.Interface, ns, name, rev string) {
	t.Helper()
	eventually(t, 90*time.Second, fmt.Sprintf("StatefulSet %s at %s", name, rev), func() (bool, string) {
		s, err := kube.AppsV1().StatefulSets(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		st := s.Status
		return st.ObservedGeneration == s.Generation && st.CurrentRevision == rev && st.UpdateRevision == rev &&
			st.ReadyReplicas == *s.Spec.Replicas && st.UpdatedReplicas == *s.Spec.Replicas, fmt.Sprintf("%+v", st)
	})
}

// waitEvent waits for an Event of type typ and reason in ns and returns it.
func waitEvent(t *testing.T, kube kubernetes.Interface, ns, typ, reason string, timeout time.Duration) corev1.Event {
	t.Helper()
	var ev corev1.Event
	eventually(t, timeout, fmt.Sprintf("a %s Event %s in %s", typ, reason, ns), func() (bool, string) {
		list, err := kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range list.Items {
			if e.Type == typ && e.Reason == reason {
				ev = e
				return true, ""
			}
			seen = append(seen, e.Type+"/"+e.Reason+" on "+e.InvolvedObject.Kind+"/"+e.InvolvedObject.Name)
		}
		return false, fmt.Sprintf("events: %v", seen)
	})
	return ev
}
