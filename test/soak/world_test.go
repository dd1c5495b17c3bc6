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
	"sync"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	rolloutsclient "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned"
	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
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
	// group: the shared-config namespace this workload is one of (nil: alone in its
	// namespace). useSts: the template also mounts the group's StatefulSet Secret.
	group  *group
	useSts bool
}

// group is the shared-config fixture: one namespace, one Git repository, with a Rollout (the
// step Rollout) and a Deployment whose templates both use the group's opted-in ConfigMap
// (every user counts: the ReplicaSets of both become its owners), and a StatefulSet whose
// template uses the group's opted-in Secret, which the Rollout's template uses too while
// useSts (the StatefulSet blocks its adoption: it never gains an owner, and is never deleted).
type group struct {
	ns      string
	rev     int
	cm, sec string // the shared ConfigMap (current shared revision), the StatefulSet's Secret
	sts     string // the StatefulSet's name
	ro, dep *workload
	ws      []*workload
}

func (w *workload) String() string { return w.ns + "/" + w.name + " (" + string(w.kind) + ")" }

// isRollout: the workload is an Argo Rollout (promote, abort, retry apply).
func (w *workload) isRollout() bool { return w.kind != kindDeployment }

func (w *workload) controllerKind() string {
	if w.kind == kindDeployment {
		return "Deployment"
	}
	return "Rollout"
}

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
	// groups: the shared-config namespaces (their workloads are in ws too).
	groups []*group
	// created: every opted-in object the soak created, with what it was created with.
	created map[string]*tracked
	// kinds: the every-kind namespace (nil: none).
	kinds *kinds
	// deliberate: objects the soak itself deleted (kubectl delete -f of a workload's
	// manifests), key -> time.Time: not the early deletions invariant 8 looks for.
	deliberate sync.Map
}

// tracked is the content an object was created with (invariant 4).
type tracked struct {
	uid         types.UID // the object created (one deleted and created again is another)
	key         string    // ns/Kind/name
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
	t := corev1.PodTemplateSpec{
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
	if g := w.group; g != nil {
		c := &t.Spec.Containers[0]
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "shared", MountPath: "/etc/shared", ReadOnly: true})
		t.Spec.Volumes = append(t.Spec.Volumes, corev1.Volume{Name: "shared", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: g.cm}}}})
		if w.useSts {
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "cache", MountPath: "/etc/cache", ReadOnly: true})
			t.Spec.Volumes = append(t.Spec.Volumes, corev1.Volume{Name: "cache", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: g.sec}}})
		}
	}
	return t
}

// stsTemplate is the group's StatefulSet template: the static ConfigMap and the group's Secret.
func (g *group) stsTemplate() corev1.PodTemplateSpec {
	no := false
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{cluster.LabelApp: g.sts}},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: &no,
			Containers: []corev1.Container{{Name: "cache", Image: "registry.invalid/cache:1",
				EnvFrom:      []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: staticName}}}},
				VolumeMounts: []corev1.VolumeMount{{Name: "cache", MountPath: "/etc/cache", ReadOnly: true}}}},
			Volumes: []corev1.Volume{{Name: "cache", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: g.sec}}}},
		},
	}
}

func (w *workload) pluginStep() v1alpha1.CanaryStep {
	cms := []string{w.cm}
	if w.group != nil {
		cms = append(cms, w.group.cm) // listed: shared with the Deployment, attached beside the live controller mode
	}
	cfg, _ := json.Marshal(map[string]any{"configMaps": cms, "secrets": []string{w.sec}})
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
	created, err := wd.kube.CoreV1().ConfigMaps(w.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: w.cm, Labels: l}, Data: cmData}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ConfigMap %s: %w", w.cm, err)
	}
	if err == nil {
		wd.created[objKey(w.ns, "ConfigMap", w.cm)] = &tracked{uid: created.UID, key: objKey(w.ns, "ConfigMap", w.cm), data: cmData, labels: l}
	}
	secData := map[string]string{"TOKEN": "token of " + w.sec}
	createdSec, err := wd.kube.CoreV1().Secrets(w.ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: w.sec, Labels: l}, StringData: secData}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create Secret %s: %w", w.sec, err)
	}
	if err == nil {
		wd.created[objKey(w.ns, "Secret", w.sec)] = &tracked{uid: createdSec.UID, key: objKey(w.ns, "Secret", w.sec), data: secData, labels: l}
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
	if err := wd.setupNamespace(w.ns); err != nil {
		return err
	}
	wd.nextRevision(w)
	if err := wd.applyConfig(w); err != nil {
		return err
	}
	_, err := wd.createWorkload(w)
	return err
}

// setupNamespace creates the namespace, waits for its default ServiceAccount and creates the
// static ConfigMap.
func (wd *world) setupNamespace(ns string) error {
	ctx := nowCtx()
	if _, err := wd.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	for {
		if _, err := wd.kube.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{}); err == nil {
			break
		}
		if ctx.Err() != nil {
			return fmt.Errorf("namespace %s: no default ServiceAccount", ns)
		}
		time.Sleep(50 * time.Millisecond)
	}
	staticData := map[string]string{"STATIC": "shared, static, unlabelled"}
	created, err := wd.kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: staticName}, Data: staticData}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	wd.created[objKey(ns, "ConfigMap", staticName)] = &tracked{uid: created.UID, key: objKey(ns, "ConfigMap", staticName), data: staticData, static: true}
	return nil
}

// setupGroup creates the shared-config namespace: the group's objects, the StatefulSet (first:
// it uses the Secret before any ReplicaSet does), then the Rollout and the Deployment.
func (wd *world) setupGroup(g *group) error {
	if err := wd.setupNamespace(g.ns); err != nil {
		return err
	}
	wd.nextSharedRevision(g)
	if err := wd.applyGroupConfig(g); err != nil {
		return err
	}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: g.sts, Namespace: g.ns},
		Spec: appsv1.StatefulSetSpec{Replicas: i32(1), ServiceName: g.sts, Template: g.stsTemplate(),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{cluster.LabelApp: g.sts}}}}
	if _, err := wd.kube.AppsV1().StatefulSets(g.ns).Create(nowCtx(), sts, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create StatefulSet %s: %w", g.sts, err)
	}
	// The controller mode's StatefulSet cache sees it before a ReplicaSet uses its Secret.
	time.Sleep(2 * time.Second)
	for _, w := range g.ws {
		wd.nextRevision(w)
		if err := wd.applyConfig(w); err != nil {
			return err
		}
		if _, err := wd.createWorkload(w); err != nil {
			return fmt.Errorf("create %s: %w", w, err)
		}
	}
	return nil
}

// nextSharedRevision moves the group's Git to a new shared revision: a new shared ConfigMap.
func (wd *world) nextSharedRevision(g *group) string {
	g.rev++
	g.cm = contentName("shared-cm", fmt.Sprintf("%s shared rev %d", g.ns, g.rev))
	if g.sec == "" {
		g.sec = contentName("cache-sec", g.ns+" cache")
	}
	return fmt.Sprintf("shared rev %d: ConfigMap %s", g.rev, g.cm)
}

// applyGroupConfig creates (if missing) the group's shared ConfigMap and the StatefulSet's Secret.
func (wd *world) applyGroupConfig(g *group) error {
	ctx := nowCtx()
	l := map[string]string{cluster.LabelRevisioned: "true", cluster.LabelApp: "shared", labelSoak: strconv.Itoa(g.rev)}
	cmData := map[string]string{"shared.conf": "config of " + g.cm}
	created, err := wd.kube.CoreV1().ConfigMaps(g.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: g.cm, Labels: l}, Data: cmData}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ConfigMap %s: %w", g.cm, err)
	}
	if err == nil {
		wd.created[objKey(g.ns, "ConfigMap", g.cm)] = &tracked{uid: created.UID, key: objKey(g.ns, "ConfigMap", g.cm), data: cmData, labels: l}
	}
	sl := map[string]string{cluster.LabelRevisioned: "true", cluster.LabelApp: g.sts, labelSoak: "1"}
	secData := map[string]string{"CACHE": "token of " + g.sec}
	createdSec, err := wd.kube.CoreV1().Secrets(g.ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: g.sec, Labels: sl}, StringData: secData}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create Secret %s: %w", g.sec, err)
	}
	if err == nil {
		wd.created[objKey(g.ns, "Secret", g.sec)] = &tracked{uid: createdSec.UID, key: objKey(g.ns, "Secret", g.sec), data: secData, labels: sl}
	}
	return nil
}

// createWorkload creates the workload's controller from its Git template (kubectl apply of a
// missing object) and returns the new UID.
func (wd *world) createWorkload(w *workload) (types.UID, error) {
	ctx := nowCtx()
	replicas := int32(1)
	if w.kind == kindCanary && w.group == nil {
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
		created, err := wd.kube.AppsV1().Deployments(w.ns).Create(ctx, d, metav1.CreateOptions{})
		if err != nil {
			return "", err
		}
		if w.kind == kindDeployment {
			return created.UID, nil
		}
		body := fmt.Sprintf(`{"apiVersion":"argoproj.io/v1alpha1","kind":"Rollout","metadata":{"name":%q},
			"spec":{"replicas":1,"revisionHistoryLimit":%d,"workloadRef":{"apiVersion":"apps/v1","kind":"Deployment","name":%q},
			"strategy":{"canary":{"steps":[{"setWeight":50},{"pause":{}}]}}}}`, w.name, historyLimit, w.deploymentName())
		return "", wd.ro.ArgoprojV1alpha1().RESTClient().Post().Namespace(w.ns).Resource("rollouts").Body([]byte(body)).Do(ctx).Error()
	case kindBlueGreen:
		for _, svc := range []string{w.name + "-active", w.name + "-preview"} {
			if _, err := wd.kube.CoreV1().Services(w.ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: svc},
				Spec: corev1.ServiceSpec{Selector: map[string]string{cluster.LabelApp: w.name}, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}},
				metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return "", err
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
	created, err := wd.ro.ArgoprojV1alpha1().Rollouts(w.ns).Create(ctx, ro, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return created.UID, nil
}

// deleteWorkload is `kubectl delete -f` of the workload's manifests: its Rollout or Deployment
// (background propagation: the garbage collector deletes its ReplicaSets), waited for until
// gone, then the current revision's ConfigMap and Secret (a group's shared objects are in the
// namespace's common manifests and stay). The Services of a blueGreen Rollout stay too.
func (wd *world) deleteWorkload(w *workload) (types.UID, error) {
	ctx := nowCtx()
	bg := metav1.DeletePropagationBackground
	opts := metav1.DeleteOptions{PropagationPolicy: &bg}
	var uid types.UID
	get := func() (types.UID, error) {
		if w.kind == kindDeployment {
			d, err := wd.kube.AppsV1().Deployments(w.ns).Get(ctx, w.name, metav1.GetOptions{})
			if err != nil {
				return "", err
			}
			return d.UID, nil
		}
		ro, err := wd.ro.ArgoprojV1alpha1().Rollouts(w.ns).Get(ctx, w.name, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		return ro.UID, nil
	}
	uid, err := get()
	if err != nil {
		return "", err
	}
	opts.Preconditions = &metav1.Preconditions{UID: &uid}
	if w.kind == kindDeployment {
		err = wd.kube.AppsV1().Deployments(w.ns).Delete(ctx, w.name, opts)
	} else {
		err = wd.ro.ArgoprojV1alpha1().Rollouts(w.ns).Delete(ctx, w.name, opts)
	}
	if err != nil {
		return uid, err
	}
	for {
		if _, err := get(); apierrors.IsNotFound(err) {
			break
		}
		if ctx.Err() != nil {
			return uid, fmt.Errorf("%s still there after its delete", w)
		}
		time.Sleep(100 * time.Millisecond)
	}
	now := time.Now()
	wd.deliberate.Store(objKey(w.ns, "ConfigMap", w.cm), now)
	wd.deliberate.Store(objKey(w.ns, "Secret", w.sec), now)
	if err := wd.kube.CoreV1().ConfigMaps(w.ns).Delete(ctx, w.cm, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return uid, err
	}
	if err := wd.kube.CoreV1().Secrets(w.ns).Delete(ctx, w.sec, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return uid, err
	}
	return uid, nil
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

// inGit is what the current manifests of a namespace contain: every workload's revision
// objects and a group's shared ones ("ConfigMap/name", "Secret/name").
func (wd *world) inGit(ns string) map[string]bool {
	keep := map[string]bool{}
	for _, w := range wd.ws {
		if w.ns != ns {
			continue
		}
		keep["ConfigMap/"+w.cm], keep["Secret/"+w.sec] = true, true
		if g := w.group; g != nil {
			keep["ConfigMap/"+g.cm], keep["Secret/"+g.sec] = true, true
		}
	}
	if wd.kinds != nil && wd.kinds.ns == ns {
		wd.kinds.inGit(keep)
	}
	return keep
}

// prune is the GitOps prune: every labelled object without owner references that the
// current manifests of the namespace do not contain is deleted. It returns what it deleted.
func (wd *world) prune(w *workload) ([]string, error) { return wd.pruneNS(w.ns) }

// pruneNS is the GitOps prune of namespace ns.
func (wd *world) pruneNS(ns string) ([]string, error) {
	ctx := nowCtx()
	keep := wd.inGit(ns)
	sel := cluster.LabelRevisioned + "=true"
	var deleted []string
	cms, err := wd.kube.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, err
	}
	for _, cm := range cms.Items {
		if !keep["ConfigMap/"+cm.Name] && len(cm.OwnerReferences) == 0 {
			err := wd.kube.CoreV1().ConfigMaps(ns).Delete(ctx, cm.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &cm.ResourceVersion}})
			if err == nil {
				deleted = append(deleted, "ConfigMap/"+cm.Name)
			} else if !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return deleted, err
			}
		}
	}
	secs, err := wd.kube.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return deleted, err
	}
	for _, s := range secs.Items {
		if !keep["Secret/"+s.Name] && len(s.OwnerReferences) == 0 {
			err := wd.kube.CoreV1().Secrets(ns).Delete(ctx, s.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &s.ResourceVersion}})
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
// Rollout's and its Deployment's), by controller UID: not those of a deleted predecessor of
// the same name (delete and recreate), nor those of the other workloads of a group.
func (wd *world) replicaSets(w *workload) ([]appsv1.ReplicaSet, error) {
	uids := map[types.UID]bool{}
	if w.isRollout() {
		ro, err := wd.getRollout(w)
		if err != nil {
			return nil, err
		}
		uids[ro.UID] = true
	}
	if w.kind == kindDeployment || w.kind == kindWorkloadRef {
		d, err := wd.kube.AppsV1().Deployments(w.ns).Get(nowCtx(), w.deploymentName(), metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		uids[d.UID] = true
	}
	list, err := wd.kube.AppsV1().ReplicaSets(w.ns).List(nowCtx(), metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []appsv1.ReplicaSet
	for _, rs := range list.Items {
		if ref := metav1.GetControllerOf(&rs); ref != nil && uids[ref.UID] && rs.DeletionTimestamp == nil {
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

// --- kubectl argo rollouts, as the plugin's CLI does it (see test/rollouts/actions_test.go) ---

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
	// A step plugin in Error at the current step is retried by the Rollouts controller: the
	// soak's user waits for it rather than promote past it (a step promoted past keeps its
	// Error status for good).
	if c := ro.Status.Canary; ro.Spec.Strategy.Canary != nil && len(ro.Status.PauseConditions) == 0 {
		idx := int32(0)
		if ro.Status.CurrentStepIndex != nil {
			idx = *ro.Status.CurrentStepIndex
		}
		for _, st := range c.StepPluginStatuses {
			if st.Index == idx && st.Phase == v1alpha1.StepPluginPhaseError {
				return fmt.Sprintf("step %d in Error (retried by the Rollouts controller): not promoted past it", idx), nil
			}
		}
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
