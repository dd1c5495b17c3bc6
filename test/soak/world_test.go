package soak

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	rolloutsclient "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned"
	"github.com/configmap-attacher/configmap-attacher/test/cluster"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// Labels of the soak's objects.
const (
	labelSoak    = "soak/revision"
	deployHash   = "pod-template-hash"
	staticName   = "static-config" // unlabelled; every template uses it; must never gain an owner
	historyLimit = 3
)

type workloadKind string

const (
	kindCanary      workloadKind = "canary"
	kindBlueGreen   workloadKind = "blueGreen"
	kindWorkloadRef workloadKind = "workloadRef"
	kindDeployment  workloadKind = "deployment"
)

// workload is one app in a namespace of its own. Its "Git" is the current revision's pod
// template and its ConfigMap and Secret (plus the static ConfigMap).
type workload struct {
	kind     workloadKind
	ns, name string
	rev      int // Git revision (applies so far)
	image    int
	cm, sec  string // the objects of the current Git revision
}

func (w *workload) String() string { return w.ns + "/" + w.name + " (" + string(w.kind) + ")" }

// isRollout: the workload is an Argo Rollout (promote, abort, retry apply).
func (w *workload) isRollout() bool { return w.kind != kindDeployment }

func (w *workload) deploymentName() string {
	if w.kind == kindWorkloadRef {
		return w.name + "-src"
	}
	return w.name
}

// contentName is a Kustomize-style content-hashed name.
func contentName(prefix, content string) string {
	h := sha256.Sum256([]byte(content))
	return prefix + "-" + hex.EncodeToString(h[:])[:8]
}

func boolPtr(b bool) *bool { return &b }
func i32(v int32) *int32   { return &v }

// world holds the workloads and the clients.
type world struct {
	kube kubernetes.Interface
	ro   rolloutsclient.Interface
	rnd  *rand.Rand
	ws   []*workload
	// created: every opted-in object the soak created, with what it was created with.
	created map[string]*tracked
}

// tracked is the content an object was created with (invariant 4).
type tracked struct {
	key         string // ns/Kind/name
	data        map[string]string
	labels      map[string]string
	annotations map[string]string
	static      bool
}

// nowCtx is a request context of 30 s.
func nowCtx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	time.AfterFunc(31*time.Second, cancel)
	return ctx
}

func objKey(ns, kind, name string) string { return ns + "/" + kind + "/" + name }

func (w *workload) template(wd *world) corev1.PodTemplateSpec {
	no := false
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{cluster.LabelApp: w.name}},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: &no,
			Containers: []corev1.Container{{
				Name: "app", Image: fmt.Sprintf("registry.invalid/%s:%d", w.name, w.image),
				EnvFrom: []corev1.EnvFromSource{
					{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: w.sec}}},
					{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: staticName}}},
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/app", ReadOnly: true},
					{Name: "static", MountPath: "/etc/static", ReadOnly: true}},
			}},
			Volumes: []corev1.Volume{
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: w.cm}}}},
				{Name: "static", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: staticName}}}},
			},
		},
	}
}

func (w *workload) pluginStep() v1alpha1.CanaryStep {
	cfg, _ := json.Marshal(map[string]any{"configMaps": []string{w.cm}, "secrets": []string{w.sec}})
	return v1alpha1.CanaryStep{Plugin: &v1alpha1.PluginStep{Name: cluster.PluginName, Config: cfg}}
}

func (w *workload) canarySteps() []v1alpha1.CanaryStep {
	weight := int32(50)
	steps := []v1alpha1.CanaryStep{{SetWeight: &weight}, {Pause: &v1alpha1.RolloutPause{}}}
	if w.kind == kindCanary {
		steps = append([]v1alpha1.CanaryStep{w.pluginStep()}, steps...)
	}
	return steps
}

// newConfig creates (if missing: a GitOps apply) the current revision's objects.
func (wd *world) applyConfig(w *workload) error {
	l := map[string]string{cluster.LabelRevisioned: "true", cluster.LabelApp: w.name, labelSoak: strconv.Itoa(w.rev)}
	ctx := nowCtx()
	cmData := map[string]string{"app.conf": "config of " + w.cm}
	_, err := wd.kube.CoreV1().ConfigMaps(w.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: w.cm, Labels: l}, Data: cmData}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ConfigMap %s: %w", w.cm, err)
	}
	if err == nil {
		wd.created[objKey(w.ns, "ConfigMap", w.cm)] = &tracked{key: objKey(w.ns, "ConfigMap", w.cm), data: cmData, labels: l}
	}
	secData := map[string]string{"TOKEN": "token of " + w.sec}
	_, err = wd.kube.CoreV1().Secrets(w.ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: w.sec, Labels: l}, StringData: secData}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create Secret %s: %w", w.sec, err)
	}
	if err == nil {
		wd.created[objKey(w.ns, "Secret", w.sec)] = &tracked{key: objKey(w.ns, "Secret", w.sec), data: secData, labels: l}
	}
	return nil
}

// nextRevision moves the workload's Git to a new revision: a new ConfigMap and Secret, or
// (sometimes) one of them kept from the previous revision, so that two revisions share it.
func (wd *world) nextRevision(w *workload) string {
	w.rev++
	salt := fmt.Sprintf("%s rev %d", w.name, w.rev)
	keepSec, keepCM := false, false
	if w.rev > 1 {
		switch r := wd.rnd.Float64(); {
		case r < 0.25:
			keepSec = true
		case r < 0.4:
			keepCM = true
		}
	}
	if !keepCM {
		w.cm = contentName(w.name+"-cm", "cm "+salt)
	}
	if !keepSec {
		w.sec = contentName(w.name+"-sec", "secret "+salt)
	}
	switch {
	case keepSec:
		return fmt.Sprintf("rev %d: ConfigMap %s, Secret %s shared with the previous revision", w.rev, w.cm, w.sec)
	case keepCM:
		return fmt.Sprintf("rev %d: ConfigMap %s shared with the previous revision, Secret %s", w.rev, w.cm, w.sec)
	}
	return fmt.Sprintf("rev %d: ConfigMap %s, Secret %s", w.rev, w.cm, w.sec)
}

// setup creates the namespace objects and the workload at revision 1.
func (wd *world) setup(w *workload) error {
	ctx := nowCtx()
	if _, err := wd.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	for {
		if _, err := wd.kube.CoreV1().ServiceAccounts(w.ns).Get(ctx, "default", metav1.GetOptions{}); err == nil {
			break
		}
		if ctx.Err() != nil {
			return fmt.Errorf("namespace %s: no default ServiceAccount", w.ns)
		}
		time.Sleep(50 * time.Millisecond)
	}
	staticData := map[string]string{"STATIC": "shared, static, unlabelled"}
	if _, err := wd.kube.CoreV1().ConfigMaps(w.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: staticName}, Data: staticData}, metav1.CreateOptions{}); err != nil {
		return err
	}
	wd.created[objKey(w.ns, "ConfigMap", staticName)] = &tracked{key: objKey(w.ns, "ConfigMap", staticName), data: staticData, static: true}
	wd.nextRevision(w)
	if err := wd.applyConfig(w); err != nil {
		return err
	}
	replicas := int32(1)
	if w.kind == kindCanary {
		replicas = 2
	}
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{cluster.LabelApp: w.name}}
	switch w.kind {
	case kindDeployment, kindWorkloadRef:
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: w.deploymentName(), Namespace: w.ns},
			Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: sel, Template: w.template(wd), RevisionHistoryLimit: i32(historyLimit)}}
		if w.kind == kindWorkloadRef {
			d.Spec.Replicas = i32(0)
		}
		if _, err := wd.kube.AppsV1().Deployments(w.ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			return err
		}
		if w.kind == kindDeployment {
			return nil
		}
		body := fmt.Sprintf(`{"apiVersion":"argoproj.io/v1alpha1","kind":"Rollout","metadata":{"name":%q},
			"spec":{"replicas":1,"revisionHistoryLimit":%d,"workloadRef":{"apiVersion":"apps/v1","kind":"Deployment","name":%q},
			"strategy":{"canary":{"steps":[{"setWeight":50},{"pause":{}}]}}}}`, w.name, historyLimit, w.deploymentName())
		return wd.ro.ArgoprojV1alpha1().RESTClient().Post().Namespace(w.ns).Resource("rollouts").Body([]byte(body)).Do(ctx).Error()
	case kindBlueGreen:
		for _, svc := range []string{w.name + "-active", w.name + "-preview"} {
			if _, err := wd.kube.CoreV1().Services(w.ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: svc},
				Spec: corev1.ServiceSpec{Selector: map[string]string{cluster.LabelApp: w.name}, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}},
				metav1.CreateOptions{}); err != nil {
				return err
			}
		}
	}
	ro := &v1alpha1.Rollout{
		ObjectMeta: metav1.ObjectMeta{Name: w.name, Namespace: w.ns},
		Spec:       v1alpha1.RolloutSpec{Replicas: &replicas, Selector: sel, Template: w.template(wd), RevisionHistoryLimit: i32(historyLimit)},
	}
	if w.kind == kindCanary {
		ro.Spec.Strategy.Canary = &v1alpha1.CanaryStrategy{Steps: w.canarySteps()}
	} else {
		ro.Spec.Strategy.BlueGreen = &v1alpha1.BlueGreenStrategy{ActiveService: w.name + "-active", PreviewService: w.name + "-preview",
			AutoPromotionEnabled: boolPtr(false), ScaleDownDelaySeconds: i32(2)}
	}
	_, err := wd.ro.ArgoprojV1alpha1().Rollouts(w.ns).Create(ctx, ro, metav1.CreateOptions{})
	return err
}

// applyTemplate writes the workload's Git template (and, for the step Rollout, the step list
// naming the revision's objects) in one update, as a GitOps sync does.
func (wd *world) applyTemplate(w *workload) error {
	ctx := nowCtx()
	if w.kind == kindDeployment || w.kind == kindWorkloadRef {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			d, err := wd.kube.AppsV1().Deployments(w.ns).Get(ctx, w.deploymentName(), metav1.GetOptions{})
			if err != nil {
				return err
			}
			d.Spec.Template = w.template(wd)
			_, err = wd.kube.AppsV1().Deployments(w.ns).Update(ctx, d, metav1.UpdateOptions{})
			return err
		})
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ro, err := wd.ro.ArgoprojV1alpha1().Rollouts(w.ns).Get(ctx, w.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		ro.Spec.Template = w.template(wd)
		if w.kind == kindCanary {
			ro.Spec.Strategy.Canary.Steps = w.canarySteps()
		}
		_, err = wd.ro.ArgoprojV1alpha1().Rollouts(w.ns).Update(ctx, ro, metav1.UpdateOptions{})
		return err
	})
}

// prune is the GitOps prune: every labelled object without owner references that the
// current manifests do not contain is deleted. It returns what it deleted.
func (wd *world) prune(w *workload) ([]string, error) {
	ctx := nowCtx()
	sel := cluster.LabelRevisioned + "=true"
	var deleted []string
	cms, err := wd.kube.CoreV1().ConfigMaps(w.ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, err
	}
	for _, cm := range cms.Items {
		if cm.Name != w.cm && len(cm.OwnerReferences) == 0 {
			err := wd.kube.CoreV1().ConfigMaps(w.ns).Delete(ctx, cm.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &cm.ResourceVersion}})
			if err == nil {
				deleted = append(deleted, "ConfigMap/"+cm.Name)
			} else if !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return deleted, err
			}
		}
	}
	secs, err := wd.kube.CoreV1().Secrets(w.ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return deleted, err
	}
	for _, s := range secs.Items {
		if s.Name != w.sec && len(s.OwnerReferences) == 0 {
			err := wd.kube.CoreV1().Secrets(w.ns).Delete(ctx, s.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &s.ResourceVersion}})
			if err == nil {
				deleted = append(deleted, "Secret/"+s.Name)
			} else if !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return deleted, err
			}
		}
	}
	sort.Strings(deleted)
	return deleted, nil
}

// replicaSets lists the ReplicaSets the workload controls (for a workloadRef Rollout, the
// Rollout's and its Deployment's).
func (wd *world) replicaSets(w *workload) ([]appsv1.ReplicaSet, error) {
	list, err := wd.kube.AppsV1().ReplicaSets(w.ns).List(nowCtx(), metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []appsv1.ReplicaSet
	for _, rs := range list.Items {
		if ref := metav1.GetControllerOf(&rs); ref != nil && rs.DeletionTimestamp == nil {
			out = append(out, rs)
		}
	}
	return out, nil
}

// settled reports whether the workload's controller has a ReplicaSet for its current
// template (the previous apply has been acted on).
func (wd *world) settled(w *workload) (bool, string) {
	ctx := nowCtx()
	var gen int64
	var observed bool
	if w.kind == kindDeployment || w.kind == kindWorkloadRef {
		d, err := wd.kube.AppsV1().Deployments(w.ns).Get(ctx, w.deploymentName(), metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		gen, observed = d.Generation, d.Status.ObservedGeneration == d.Generation
		if w.kind == kindDeployment && !observed {
			return false, fmt.Sprintf("Deployment generation %d not observed", gen)
		}
	}
	if w.isRollout() {
		ro, err := wd.ro.ArgoprojV1alpha1().Rollouts(w.ns).Get(ctx, w.name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if ro.Status.ObservedGeneration != strconv.FormatInt(ro.Generation, 10) {
			return false, "Rollout generation not observed"
		}
		if w.kind == kindWorkloadRef && ro.Status.WorkloadObservedGeneration != strconv.FormatInt(gen, 10) {
			return false, "workload generation not observed"
		}
		if ro.Status.CurrentPodHash == "" {
			return false, "no currentPodHash"
		}
		rss, err := wd.replicaSets(w)
		if err != nil {
			return false, err.Error()
		}
		for _, rs := range rss {
			if rs.Labels[cluster.RolloutsHashLabel] == ro.Status.CurrentPodHash {
				return true, ""
			}
		}
		return false, "no ReplicaSet for currentPodHash " + ro.Status.CurrentPodHash
	}
	return true, ""
}

// --- kubectl argo rollouts, as the plugin's CLI does it (see test/e2e/actions_test.go) ---

func (wd *world) getRollout(w *workload) (*v1alpha1.Rollout, error) {
	return wd.ro.ArgoprojV1alpha1().Rollouts(w.ns).Get(nowCtx(), w.name, metav1.GetOptions{})
}

func (wd *world) patchStatus(w *workload, patch string) error {
	_, err := wd.ro.ArgoprojV1alpha1().Rollouts(w.ns).Patch(nowCtx(), w.name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
	return err
}

func (wd *world) unpause(ro *v1alpha1.Rollout) error {
	if !ro.Spec.Paused {
		return nil
	}
	_, err := wd.ro.ArgoprojV1alpha1().Rollouts(ro.Namespace).Patch(nowCtx(), ro.Name, types.MergePatchType, []byte(`{"spec":{"paused":false}}`), metav1.PatchOptions{})
	return err
}

// promote is `kubectl argo rollouts promote`.
func (wd *world) promote(w *workload) (string, error) {
	ro, err := wd.getRollout(w)
	if err != nil {
		return "", err
	}
	patch := cluster.PromotePatch(ro)
	if patch == "" {
		return "nothing to promote", wd.unpause(ro)
	}
	if err := wd.patchStatus(w, patch); err != nil {
		return "", err
	}
	return patch, wd.unpause(ro)
}

// promoteFull is `kubectl argo rollouts promote --full`.
func (wd *world) promoteFull(w *workload) (string, error) {
	ro, err := wd.getRollout(w)
	if err != nil {
		return "", err
	}
	msg := "already stable"
	if ro.Status.CurrentPodHash != ro.Status.StableRS {
		msg = "promoteFull"
		if err := wd.patchStatus(w, `{"status":{"promoteFull":true}}`); err != nil {
			return "", err
		}
	}
	return msg, wd.unpause(ro)
}

// undo is `kubectl argo rollouts undo --to-revision=N` (Rollout) or `kubectl rollout undo
// --to-revision=N` (Deployment): an older ReplicaSet's template, without its hash label,
// replaces spec.template. It picks a random revision in history other than the current one.
func (wd *world) undo(w *workload) (string, error) {
	rss, err := wd.replicaSets(w)
	if err != nil {
		return "", err
	}
	hashLabel, revAnn := cluster.RolloutsHashLabel, "rollout.argoproj.io/revision"
	var current string
	if w.kind == kindDeployment {
		hashLabel, revAnn = deployHash, "deployment.kubernetes.io/revision"
		d, err := wd.kube.AppsV1().Deployments(w.ns).Get(nowCtx(), w.name, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		for _, rs := range rss {
			tpl := rs.Spec.Template.DeepCopy()
			delete(tpl.Labels, deployHash)
			if templatesEqual(tpl, &d.Spec.Template) {
				current = rs.Name
			}
		}
	} else {
		ro, err := wd.getRollout(w)
		if err != nil {
			return "", err
		}
		for _, rs := range rss {
			if rs.Labels[cluster.RolloutsHashLabel] == ro.Status.CurrentPodHash {
				current = rs.Name
			}
		}
	}
	var candidates []appsv1.ReplicaSet
	for _, rs := range rss {
		if rs.Name != current && rs.Labels[hashLabel] != "" && ownedByKind(&rs, w) {
			candidates = append(candidates, rs)
		}
	}
	if len(candidates) == 0 {
		return "no other revision in history", nil
	}
	sort.Slice(candidates, func(i, j int) bool { return candidates[i].Name < candidates[j].Name })
	rs := candidates[wd.rnd.Intn(len(candidates))]
	tpl := rs.Spec.Template.DeepCopy()
	delete(tpl.Labels, hashLabel)
	patch, err := json.Marshal([]any{map[string]any{"op": "replace", "path": "/spec/template", "value": tpl}})
	if err != nil {
		return "", err
	}
	msg := fmt.Sprintf("to revision %s (ReplicaSet %s)", rs.Annotations[revAnn], rs.Name)
	if w.kind == kindDeployment {
		_, err = wd.kube.AppsV1().Deployments(w.ns).Patch(nowCtx(), w.name, types.JSONPatchType, patch, metav1.PatchOptions{})
	} else {
		_, err = wd.ro.ArgoprojV1alpha1().Rollouts(w.ns).Patch(nowCtx(), w.name, types.JSONPatchType, patch, metav1.PatchOptions{})
	}
	return msg, err
}

func ownedByKind(rs *appsv1.ReplicaSet, w *workload) bool {
	ref := metav1.GetControllerOf(rs)
	if ref == nil {
		return false
	}
	if w.kind == kindDeployment {
		return ref.Kind == "Deployment"
	}
	return ref.Kind == "Rollout"
}

func templatesEqual(a, b *corev1.PodTemplateSpec) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// deletePods deletes up to n random live pods of the workload's namespace.
func (wd *world) deletePods(w *workload, n int) (string, error) {
	pods, err := wd.kube.CoreV1().Pods(w.ns).List(nowCtx(), metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	var live []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	sort.Slice(live, func(i, j int) bool { return live[i].Name < live[j].Name })
	var names []string
	for i := 0; i < n && len(live) > 0; i++ {
		k := wd.rnd.Intn(len(live))
		p := live[k]
		live = append(live[:k], live[k+1:]...)
		if err := wd.kube.CoreV1().Pods(w.ns).Delete(nowCtx(), p.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return strings.Join(names, ","), err
		}
		names = append(names, p.Name)
	}
	if len(names) == 0 {
		return "no pod", nil
	}
	return strings.Join(names, ", "), nil
}
