package bench

// The other users the controller keeps (make bench-scale): ControllerRevisions of
// StatefulSets, Jobs, bare Pods and anchors, each kind added by a leaf of its own so that the
// report (report_scale_test.go) fits its cost from that leaf alone, and predicts the mix of
// kinds at the largest size from costs fitted elsewhere. No StatefulSet, Job or scheduler
// controller runs in the benchmark's cluster: the objects stay as created (revisions as their
// StatefulSets would have written them, Jobs without pods, Pods Pending).

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

const (
	// scaleRevisions ControllerRevisions (scaleRSPerWorkload per StatefulSet, whose own
	// template uses nothing), scaleJobs Jobs and scalePods bare Pods, each using an opted-in
	// ConfigMap and an opted-in Secret of its own, as a ReplicaSet does.
	scaleRevisions, scaleJobs, scalePods = 2000, 1000, 2000
	// scaleAnchors StatefulSets whose template uses an opted-in ConfigMap and Secret of its
	// own: the controller keeps an anchor for each.
	scaleAnchors = 2000
)

// userKinds are the metrics keys of the user kinds a phase records, in the order of their leaves.
var userKinds = []string{"revisions", "jobs", "pods", "anchors"}

// createOptedIn creates the opted-in ConfigMap and Secret a user of another kind uses.
func (e *scaleEnv) createOptedIn(ctx context.Context, ns, cm, sec string) error {
	if _, err := e.admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cm, Labels: optInLabels},
		Data: map[string]string{"app.yaml": strings.Repeat("k: v\n", 40)}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create ConfigMap %s/%s: %w", ns, cm, err)
	}
	if _, err := e.admin.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: sec, Labels: optInLabels},
		Data: map[string][]byte{"token": []byte(strings.Repeat("s", 64))}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create Secret %s/%s: %w", ns, sec, err)
	}
	return nil
}

// statefulSet creates a StatefulSet (replicas 0) whose template uses cm and sec (none when empty).
func (e *scaleEnv) statefulSet(ctx context.Context, ns, name, cm, sec string) (*appsv1.StatefulSet, error) {
	var cms, secs []string
	if cm != "" {
		cms, secs = []string{cm}, []string{sec}
	}
	zero := int32(0)
	l := map[string]string{"app": name}
	s, err := e.admin.AppsV1().StatefulSets(ns).Create(ctx, &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.StatefulSetSpec{Replicas: &zero, ServiceName: name, Selector: &metav1.LabelSelector{MatchLabels: l},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: l}, Spec: ctlSpec(cms, secs)}}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create StatefulSet %s/%s: %w", ns, name, err)
	}
	return s, nil
}

// revisionData is a StatefulSet revision's data as the statefulset controller writes it: the
// template as a strategic merge patch that replaces it.
func revisionData(spec corev1.PodSpec, labels map[string]string) ([]byte, error) {
	b, err := json.Marshal(corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec})
	if err != nil {
		return nil, err
	}
	var tpl map[string]any
	if err := json.Unmarshal(b, &tpl); err != nil {
		return nil, err
	}
	tpl["$patch"] = "replace"
	return json.Marshal(map[string]any{"spec": map[string]any{"template": tpl}})
}

// addUsers creates n users of one kind with create(i, ns), spread over the namespaces, 48 at a
// time, each with its own opted-in ConfigMap and Secret.
func (e *scaleEnv) addUsers(b *testing.B, what string, n int, create func(ctx context.Context, i int, ns string) error) {
	b.Helper()
	t0 := time.Now()
	g := new(errgroup.Group)
	g.SetLimit(48)
	for i := 0; i < n; i++ {
		g.Go(func() error {
			ctx, cancel := e.ctx()
			defer cancel()
			return create(ctx, i, e.nss[i%len(e.nss)])
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	b.Logf("created %d %s (2 opted-in objects per user) in %v", n, what, time.Since(t0).Round(time.Millisecond))
}

// addRevisions creates n ControllerRevisions, scaleRSPerWorkload per StatefulSet.
func (e *scaleEnv) addRevisions(b *testing.B, n int) {
	e.addUsers(b, fmt.Sprintf("StatefulSets with %d ControllerRevisions", scaleRSPerWorkload), n/scaleRSPerWorkload, func(ctx context.Context, i int, ns string) error {
		name := fmt.Sprintf("sts%d", i)
		s, err := e.statefulSet(ctx, ns, name, "", "")
		if err != nil {
			return err
		}
		yes := true
		for j := 0; j < scaleRSPerWorkload; j++ {
			cm, sec := fmt.Sprintf("%s-c%d", name, j), fmt.Sprintf("%s-s%d", name, j)
			if err := e.createOptedIn(ctx, ns, cm, sec); err != nil {
				return err
			}
			data, err := revisionData(ctlSpec([]string{cm}, []string{sec}), s.Spec.Template.Labels)
			if err != nil {
				return err
			}
			if _, err := e.admin.AppsV1().ControllerRevisions(ns).Create(ctx, &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{
				Name: fmt.Sprintf("%s-%d", name, j), Labels: s.Spec.Template.Labels,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: name, UID: s.UID, Controller: &yes}}},
				Data: runtime.RawExtension{Raw: data}, Revision: int64(j + 1)}, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("create ControllerRevision %s/%s-%d: %w", ns, name, j, err)
			}
		}
		return nil
	})
	e.revisions += n / scaleRSPerWorkload * scaleRSPerWorkload
	e.optedIn += 2 * (n / scaleRSPerWorkload * scaleRSPerWorkload)
}

// addJobs creates n Jobs (no job controller runs: they stay without pods).
func (e *scaleEnv) addJobs(b *testing.B, n int) {
	e.addUsers(b, "Jobs", n, func(ctx context.Context, i int, ns string) error {
		name := fmt.Sprintf("job%d", i)
		cm, sec := name+"-c", name+"-s"
		if err := e.createOptedIn(ctx, ns, cm, sec); err != nil {
			return err
		}
		spec := ctlSpec([]string{cm}, []string{sec})
		spec.RestartPolicy = corev1.RestartPolicyNever
		_, err := e.admin.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: spec}}}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create Job %s/%s: %w", ns, name, err)
		}
		return nil
	})
	e.jobs += n
	e.optedIn += 2 * n
}

// addPods creates n bare Pods (no scheduler runs: they stay Pending).
func (e *scaleEnv) addPods(b *testing.B, n int) {
	e.addUsers(b, "bare Pods", n, func(ctx context.Context, i int, ns string) error {
		name := fmt.Sprintf("pod%d", i)
		cm, sec := name+"-c", name+"-s"
		if err := e.createOptedIn(ctx, ns, cm, sec); err != nil {
			return err
		}
		if _, err := e.admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: ctlSpec([]string{cm}, []string{sec})}, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create Pod %s/%s: %w", ns, name, err)
		}
		return nil
	})
	e.pods += n
	e.optedIn += 2 * n
}

// addAnchored creates n StatefulSets whose templates use objects of their own: the controller
// creates an anchor for each.
func (e *scaleEnv) addAnchored(b *testing.B, n int) {
	e.addUsers(b, "StatefulSets with an anchor", n, func(ctx context.Context, i int, ns string) error {
		name := fmt.Sprintf("anchored%d", i)
		cm, sec := name+"-c", name+"-s"
		if err := e.createOptedIn(ctx, ns, cm, sec); err != nil {
			return err
		}
		_, err := e.statefulSet(ctx, ns, name, cm, sec)
		return err
	})
	e.anchors += n
	e.optedIn += 2 * n
}
