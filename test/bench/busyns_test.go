package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"golang.org/x/sync/errgroup"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/configmap-attacher/configmap-attacher/plugin"
)

// The busy namespace's make-up, per 100 Pods: 89 Pods of ReplicaSets (of Rollouts), 6 of
// StatefulSets, 4 of Jobs and 1 of a controller kind the project does not know (a Workflow of
// the bench's own CRD, as Argo Workflows or Tekton make).
const (
	busyRSPerMille       = 890
	busySTSPerMille      = 60
	busyJobPerMille      = 40
	busyUnknownPerMille  = 10
	busyPodsPerWorkload  = 89 // Pods of each Rollout's current ReplicaSet
	busyRevisions        = 5  // ReplicaSets per Rollout: 4 old ones (0 replicas) and the current one
	busyPodsPerSTS       = 10
	busyPodsPerWorkflow  = 5
	busyCreateConcurrent = 32
	busyLabel            = "bench.configmap-attacher/busy"
)

// workflowGVR is the unknown controller kind of the busy namespace.
var workflowGVR = schema.GroupVersionResource{Group: "bench.example", Version: "v1", Resource: "workflows"}

// busyShape is how many workloads and Pods of each kind a namespace of pods Pods holds.
type busyShape struct {
	pods                                  int
	rollouts, rsPods                      int
	statefulSets, stsPods, jobs, wfs, wfP int
}

func shapeOf(pods int) busyShape {
	s := busyShape{pods: pods}
	s.rsPods = pods * busyRSPerMille / 1000
	s.rollouts = s.rsPods / busyPodsPerWorkload
	s.stsPods = pods * busySTSPerMille / 1000
	s.statefulSets = s.stsPods / busyPodsPerSTS
	s.jobs = pods * busyJobPerMille / 1000
	s.wfP = pods * busyUnknownPerMille / 1000
	s.wfs = s.wfP / busyPodsPerWorkflow
	return s
}

// populateBusy fills namespaces (Pod count → namespace) with their workloads and Pods, created
// directly (no kubelet: the Pods stay Pending, which the step does not look at). The
// replicaset-controller would create a ReplicaSet's replicas itself and then delete the surplus
// of ours, so kube-controller-manager is stopped while the current ReplicaSets and the Pods are
// created and started again after; the run then waits until every ReplicaSet's status counts
// exactly its Pods (the controller accepted them, deleted none). StatefulSets and Jobs have no
// controller in the bench cluster, so their Pods stay as made; the garbage collector sees every
// owner present.
func (e *env) populateBusy(b *testing.B, namespaces map[int]string) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	t0 := time.Now()
	e.installWorkflowCRD(b, ctx)
	if err := e.c.StopControllerManager(); err != nil {
		b.Fatal(err)
	}
	restarted := false
	defer func() {
		if !restarted {
			_ = e.c.StartControllerManager()
		}
	}()
	var current []*appsv1.ReplicaSet
	for pods, ns := range namespaces {
		rss, err := e.fillBusy(ctx, ns, shapeOf(pods))
		if err != nil {
			b.Fatalf("busy namespace of %d Pods: %v", pods, err)
		}
		current = append(current, rss...)
	}
	restarted = true
	if err := e.c.StartControllerManager(); err != nil {
		b.Fatal(err)
	}
	e.waitReplicaSetsSettled(b, ctx, current)
	b.Logf("busy namespaces %v made in %v", namespaces, time.Since(t0).Round(time.Millisecond))
}

// fillBusy creates one namespace's workloads, then all its Pods concurrently. It returns the
// current ReplicaSets (those with replicas).
func (e *env) fillBusy(ctx context.Context, ns string, s busyShape) ([]*appsv1.ReplicaSet, error) {
	var pods []*corev1.Pod
	var current []*appsv1.ReplicaSet
	for i := 0; i < s.rollouts; i++ {
		rs, ps, err := e.busyRollout(ctx, ns, fmt.Sprintf("app-%03d", i))
		if err != nil {
			return nil, err
		}
		current = append(current, rs)
		pods = append(pods, ps...)
	}
	for i := 0; i < s.statefulSets; i++ {
		ps, err := e.busyStatefulSet(ctx, ns, fmt.Sprintf("db-%03d", i))
		if err != nil {
			return nil, err
		}
		pods = append(pods, ps...)
	}
	for i := 0; i < s.jobs; i++ {
		p, err := e.busyJob(ctx, ns, fmt.Sprintf("batch-%04d", i))
		if err != nil {
			return nil, err
		}
		pods = append(pods, p)
	}
	for i := 0; i < s.wfs; i++ {
		ps, err := e.busyWorkflow(ctx, ns, fmt.Sprintf("wf-%03d", i))
		if err != nil {
			return nil, err
		}
		pods = append(pods, ps...)
	}
	if len(pods) != s.pods {
		return nil, fmt.Errorf("made %d Pods, want %d (shape %+v)", len(pods), s.pods, s)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(busyCreateConcurrent)
	for _, p := range pods {
		g.Go(func() error {
			_, err := e.admin.CoreV1().Pods(ns).Create(gctx, p, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("create Pod %s: %w", p.Name, err)
			}
			return nil
		})
	}
	return current, g.Wait()
}

// busyPodSpec is a realistic pod spec: a few env vars, one from a Secret of its own, a
// ConfigMap of its own mounted as a volume, resources, no token mount (no ServiceAccount
// token is needed without a kubelet, and the default ServiceAccount's token is not minted).
func busyPodSpec(app string) corev1.PodSpec {
	return corev1.PodSpec{
		AutomountServiceAccountToken: ptrTo(false),
		Containers: []corev1.Container{{
			Name: "app", Image: "registry.example/" + app + ":1.4.2",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
			Env: []corev1.EnvVar{
				{Name: "APP_NAME", Value: app},
				{Name: "LOG_LEVEL", Value: "info"},
				{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
				{Name: "DB_PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: app + "-db"}, Key: "password"}}},
			},
			VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/" + app}},
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")}},
		}},
		Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: app + "-config"}}}}},
	}
}

func ptrTo[T any](v T) *T { return &v }

// busyMeta is a Pod's or template's metadata: the workload's labels plus the usual few
// annotations.
func busyMeta(name, app string, extra map[string]string, owner *metav1.OwnerReference) metav1.ObjectMeta {
	labels := map[string]string{"app": app, "team": "payments", "tier": "backend", busyLabel: "true"}
	for k, v := range extra {
		labels[k] = v
	}
	m := metav1.ObjectMeta{Name: name, Labels: labels, Annotations: map[string]string{
		"prometheus.io/scrape": "true", "prometheus.io/port": "8080",
		"kubectl.kubernetes.io/default-container": "app"}}
	if owner != nil {
		m.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	return m
}

func controllerRef(apiVersion, kind, name string, uid metav1.Object) *metav1.OwnerReference {
	return &metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: uid.GetUID(),
		Controller: ptrTo(true), BlockOwnerDeletion: ptrTo(true)}
}

// busyRollout is a Rollout with busyRevisions ReplicaSets: the old ones at 0 replicas, the
// current one at busyPodsPerWorkload, and that one's Pods (returned, not created).
func (e *env) busyRollout(ctx context.Context, ns, app string) (*appsv1.ReplicaSet, []*corev1.Pod, error) {
	ro := &v1alpha1.Rollout{
		ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: ns, Labels: map[string]string{busyLabel: "true"}},
		Spec: v1alpha1.RolloutSpec{
			Replicas: ptrTo(int32(busyPodsPerWorkload)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
			Template: corev1.PodTemplateSpec{ObjectMeta: busyMeta("", app, nil, nil), Spec: busyPodSpec(app)},
			Strategy: v1alpha1.RolloutStrategy{Canary: &v1alpha1.CanaryStrategy{}},
		},
	}
	ro, err := e.rollouts.ArgoprojV1alpha1().Rollouts(ns).Create(ctx, ro, metav1.CreateOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("create Rollout %s: %w", app, err)
	}
	owner := *metav1.NewControllerRef(ro, v1alpha1.SchemeGroupVersion.WithKind("Rollout"))
	var rs *appsv1.ReplicaSet
	for rev := 1; rev <= busyRevisions; rev++ {
		hash := fmt.Sprintf("%s-r%d", app, rev)
		replicas := int32(0)
		if rev == busyRevisions {
			replicas = busyPodsPerWorkload
		}
		sel := map[string]string{"app": app, plugin.PodTemplateHashLabel: hash}
		tmpl := corev1.PodTemplateSpec{ObjectMeta: busyMeta("", app, sel, nil), Spec: busyPodSpec(app)}
		tmpl.Spec.Containers[0].Image = fmt.Sprintf("registry.example/%s:1.%d.0", app, rev)
		rs = &appsv1.ReplicaSet{
			ObjectMeta: metav1.ObjectMeta{Name: app + "-" + hash, Namespace: ns, Labels: sel, OwnerReferences: []metav1.OwnerReference{owner},
				Annotations: map[string]string{"rollout.argoproj.io/revision": fmt.Sprint(rev)}},
			Spec: appsv1.ReplicaSetSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: sel}, Template: tmpl},
		}
		if rs, err = e.admin.AppsV1().ReplicaSets(ns).Create(ctx, rs, metav1.CreateOptions{}); err != nil {
			return nil, nil, fmt.Errorf("create ReplicaSet of %s: %w", app, err)
		}
	}
	ref := controllerRef("apps/v1", "ReplicaSet", rs.Name, rs)
	pods := make([]*corev1.Pod, 0, busyPodsPerWorkload)
	for i := 0; i < busyPodsPerWorkload; i++ {
		p := &corev1.Pod{ObjectMeta: busyMeta(fmt.Sprintf("%s-%05d", rs.Name, i), app, rs.Spec.Selector.MatchLabels, ref), Spec: *rs.Spec.Template.Spec.DeepCopy()}
		pods = append(pods, p)
	}
	return rs, pods, nil
}

// busyStatefulSet is a StatefulSet with two ControllerRevisions (its Pods on the second) and
// its Pods (returned, not created). No statefulset-controller runs: the revisions are made as
// it would make them.
func (e *env) busyStatefulSet(ctx context.Context, ns, app string) ([]*corev1.Pod, error) {
	sel := map[string]string{"app": app}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: ns, Labels: map[string]string{busyLabel: "true"}},
		Spec: appsv1.StatefulSetSpec{Replicas: ptrTo(int32(busyPodsPerSTS)), ServiceName: app, Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{ObjectMeta: busyMeta("", app, nil, nil), Spec: busyPodSpec(app)}},
	}
	sts, err := e.admin.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create StatefulSet %s: %w", app, err)
	}
	ref := controllerRef("apps/v1", "StatefulSet", sts.Name, sts)
	var hash string
	for rev := int64(1); rev <= 2; rev++ {
		tmpl := sts.Spec.Template.DeepCopy()
		tmpl.Spec.Containers[0].Image = fmt.Sprintf("registry.example/%s:2.%d.0", app, rev)
		raw, err := json.Marshal(map[string]any{"spec": map[string]any{"template": tmpl, "$patch": "replace"}})
		if err != nil {
			return nil, err
		}
		hash = fmt.Sprintf("%s-%d", app, rev)
		cr := &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: hash, Namespace: ns, Labels: map[string]string{"app": app, appsv1.ControllerRevisionHashLabelKey: hash},
			OwnerReferences: []metav1.OwnerReference{*ref}}, Data: runtime.RawExtension{Raw: raw}, Revision: rev}
		if _, err := e.admin.AppsV1().ControllerRevisions(ns).Create(ctx, cr, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("create ControllerRevision %s: %w", hash, err)
		}
	}
	pods := make([]*corev1.Pod, 0, busyPodsPerSTS)
	for i := 0; i < busyPodsPerSTS; i++ {
		name := fmt.Sprintf("%s-%d", app, i)
		p := &corev1.Pod{ObjectMeta: busyMeta(name, app, map[string]string{appsv1.ControllerRevisionHashLabelKey: hash,
			appsv1.StatefulSetPodNameLabel: name}, ref), Spec: busyPodSpec(app)}
		p.Spec.Hostname, p.Spec.Subdomain = name, app
		pods = append(pods, p)
	}
	return pods, nil
}

// busyJob is a Job and its one Pod (returned, not created). No job-controller runs.
func (e *env) busyJob(ctx context.Context, ns, app string) (*corev1.Pod, error) {
	spec := busyPodSpec(app)
	spec.RestartPolicy = corev1.RestartPolicyNever
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: ns, Labels: map[string]string{busyLabel: "true"}},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{ObjectMeta: busyMeta("", app, nil, nil), Spec: spec}}}
	job, err := e.admin.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create Job %s: %w", app, err)
	}
	// The apiserver generated the Job's selector labels (controller-uid, job-name): the Pod
	// carries them, as the job-controller's would.
	p := &corev1.Pod{ObjectMeta: busyMeta(app+"-x7k2p", app, job.Spec.Template.Labels, controllerRef("batch/v1", "Job", job.Name, job)), Spec: spec}
	return p, nil
}

// busyWorkflow is a Workflow (the unknown kind) and its Pods (returned, not created).
func (e *env) busyWorkflow(ctx context.Context, ns, app string) ([]*corev1.Pod, error) {
	dc, err := dynamic.NewForConfig(e.c.AdminConfig)
	if err != nil {
		return nil, err
	}
	wf := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "bench.example/v1", "kind": "Workflow",
		"metadata": map[string]any{"name": app, "labels": map[string]any{busyLabel: "true"}}, "spec": map[string]any{"entrypoint": "main"}}}
	wf, err = dc.Resource(workflowGVR).Namespace(ns).Create(ctx, wf, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create Workflow %s: %w", app, err)
	}
	ref := controllerRef("bench.example/v1", "Workflow", wf.GetName(), wf)
	pods := make([]*corev1.Pod, 0, busyPodsPerWorkflow)
	for i := 0; i < busyPodsPerWorkflow; i++ {
		spec := busyPodSpec(app)
		spec.RestartPolicy = corev1.RestartPolicyNever
		pods = append(pods, &corev1.Pod{ObjectMeta: busyMeta(fmt.Sprintf("%s-step-%d", app, i), app,
			map[string]string{"workflows.bench.example/workflow": app}, ref), Spec: spec})
	}
	return pods, nil
}

// installWorkflowCRD installs workflows.bench.example (once per cluster) and waits until it is
// served.
func (e *env) installWorkflowCRD(b *testing.B, ctx context.Context) {
	b.Helper()
	dc, err := dynamic.NewForConfig(e.c.AdminConfig)
	if err != nil {
		b.Fatal(err)
	}
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "workflows.bench.example"},
		"spec": map[string]any{"group": "bench.example", "scope": "Namespaced",
			"names": map[string]any{"plural": "workflows", "singular": "workflow", "kind": "Workflow", "listKind": "WorkflowList"},
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}},
	}}
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	if _, err := dc.Resource(crds).Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatal(err)
	}
	for {
		if _, err := dc.Resource(workflowGVR).Namespace(e.ns).List(ctx, metav1.ListOptions{Limit: 1}); err == nil {
			return
		}
		select {
		case <-ctx.Done():
			b.Fatalf("workflows.bench.example not served: %v", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitReplicaSetsSettled waits until the restarted replicaset-controller has observed every
// current ReplicaSet and counts exactly its replicas: it accepted the Pods and deleted none.
func (e *env) waitReplicaSetsSettled(b *testing.B, ctx context.Context, rss []*appsv1.ReplicaSet) {
	b.Helper()
	for _, want := range rss {
		for {
			rs, err := e.admin.AppsV1().ReplicaSets(want.Namespace).Get(ctx, want.Name, metav1.GetOptions{})
			if err != nil {
				b.Fatal(err)
			}
			if rs.Status.ObservedGeneration == rs.Generation && rs.Status.Replicas == *rs.Spec.Replicas {
				break
			}
			if rs.Status.Replicas > *rs.Spec.Replicas {
				b.Fatalf("ReplicaSet %s/%s counts %d Pods, want %d", rs.Namespace, rs.Name, rs.Status.Replicas, *rs.Spec.Replicas)
			}
			select {
			case <-ctx.Done():
				b.Fatalf("ReplicaSet %s/%s: status %d replicas (generation %d observed %d), want %d: %v", rs.Namespace, rs.Name,
					rs.Status.Replicas, rs.Generation, rs.Status.ObservedGeneration, *rs.Spec.Replicas, ctx.Err())
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
}

// busyNamespace creates a namespace for a busy fixture; at the end of the benchmark it is
// deleted and waited for (up to 3 minutes), so that the namespace controller's and the garbage
// collector's work does not overlap the next benchmark.
func (e *env) busyNamespace(b *testing.B, pods int) string {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns, err := e.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		GenerateName: fmt.Sprintf("bench-busy-%d-", pods)}}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	// The Pods' admission wants the default ServiceAccount, which the serviceaccount-controller
	// makes.
	for {
		if _, err := e.admin.CoreV1().ServiceAccounts(ns.Name).Get(ctx, "default", metav1.GetOptions{}); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			b.Fatalf("namespace %s: no default ServiceAccount: %v", ns.Name, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if err := e.admin.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{}); err != nil {
			b.Logf("delete namespace %s: %v", ns.Name, err)
			return
		}
		for ctx.Err() == nil {
			if _, err := e.admin.CoreV1().Namespaces().Get(ctx, ns.Name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
				return
			}
			time.Sleep(500 * time.Millisecond)
		}
		b.Logf("namespace %s still terminating after 3 minutes", ns.Name)
	})
	return ns.Name
}
