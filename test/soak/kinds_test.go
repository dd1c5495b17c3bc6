package soak

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
)

// The every-kind namespace: one user of each kind the controller mode maintains besides the
// Rollouts and Deployments of the other namespaces. Two Deployments (revisionHistoryLimit 1)
// share one opted-in ConfigMap; a StatefulSet, a DaemonSet and a CronJob each use an opted-in
// ConfigMap and Secret of their own revision; the CronJob's Jobs (from its `* * * * *`
// schedule and made by hand as `kubectl create job --from=cronjob/…` does) run to completion
// on the fake kubelet, some with ttlSecondsAfterFinished.

// Kinds of the every-kind namespace's workloads.
const (
	kDeployment  = "Deployment"
	kStatefulSet = "StatefulSet"
	kDaemonSet   = "DaemonSet"
	kCronJob     = "CronJob"
)

// jobImage is the CronJob's image: the fake kubelet runs its pods to completion (/bin/sleep
// with the container's args), jobRun long.
const (
	jobImage = "registry.invalid/soak-job"
	jobRun   = 20 * time.Second
)

// nodeName is the one Node (Ready, untainted): the DaemonSet runs a pod for it.
const nodeName = "soak-node"

// kindsOps are the operations on the every-kind namespace (opWeights' kinds entries).
var kindsOps = []string{"setImage", "stsUpdate", "cronRun", "dsUpdate", "cronTemplate", "jobDelete", "reapply"}

// kworkload is one workload of the every-kind namespace and its Git state.
type kworkload struct {
	kind, name string
	rev, image int
	cm, sec    string // its own revision's objects (empty: it uses the shared ConfigMap only)
	shared     bool   // uses the namespace's shared ConfigMap
	ttl        bool   // CronJob: its jobTemplate sets ttlSecondsAfterFinished
	suspend    bool   // CronJob: suspended (the quiet phase)
}

func (w *kworkload) String() string { return w.kind + " " + w.name }

// kinds is the every-kind namespace.
type kinds struct {
	ns       string
	sharedCM string
	ws       []*kworkload
	deps     []*kworkload // the two Deployments sharing sharedCM
	sts, ds  *kworkload
	cron     *kworkload
	jobs     int // Jobs made by hand so far
	// reapplied counts the delete-and-re-apply operations by kind.
	reapplied map[string]int
}

func newKinds(ns string) *kinds {
	k := &kinds{ns: ns, reapplied: map[string]int{}}
	k.deps = []*kworkload{{kind: kDeployment, name: "web-a", image: 1, shared: true}, {kind: kDeployment, name: "web-b", image: 1, shared: true}}
	k.sts = &kworkload{kind: kStatefulSet, name: "db", image: 1}
	k.ds = &kworkload{kind: kDaemonSet, name: "agent", image: 1}
	k.cron = &kworkload{kind: kCronJob, name: "batch", image: 1}
	k.ws = append(append(k.ws, k.deps...), k.sts, k.ds, k.cron)
	return k
}

// nextRevision moves w's Git to a new revision: a new ConfigMap and Secret.
func (k *kinds) nextRevision(w *kworkload) string {
	w.rev++
	salt := fmt.Sprintf("%s %s rev %d", k.ns, w.name, w.rev)
	w.cm, w.sec = contentName(w.name+"-cm", "cm "+salt), contentName(w.name+"-sec", "secret "+salt)
	return fmt.Sprintf("rev %d: ConfigMap %s, Secret %s", w.rev, w.cm, w.sec)
}

// refs are the objects w's template references (static-config aside).
func (w *kworkload) refs(k *kinds) []cluster.ConfigRef {
	if w.shared {
		return []cluster.ConfigRef{cluster.ConfigMapRef(k.sharedCM)}
	}
	return []cluster.ConfigRef{cluster.ConfigMapRef(w.cm), cluster.SecretRef(w.sec)}
}

// podTemplate is w's Git pod template.
func (k *kinds) podTemplate(w *kworkload) corev1.PodTemplateSpec {
	no := false
	image := fmt.Sprintf("registry.invalid/%s:%d", w.name, w.image)
	if w.kind == kCronJob {
		image = fmt.Sprintf("%s:%d", jobImage, w.image)
	}
	c := corev1.Container{Name: "app", Image: image,
		EnvFrom:      []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: staticName}}}},
		VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/app", ReadOnly: true}}}
	cm := w.cm
	if w.shared {
		cm = k.sharedCM
	} else {
		c.EnvFrom = append(c.EnvFrom, corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: w.sec}}})
	}
	t := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{cluster.LabelApp: w.name}},
		Spec: corev1.PodSpec{AutomountServiceAccountToken: &no, Containers: []corev1.Container{c},
			Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm}}}}}},
	}
	if w.kind == kCronJob {
		// The fake kubelet runs it as `sleep 20`: a Job runs for 20 s, long enough for the
		// jobTemplate to move on under it.
		t.Spec.RestartPolicy = corev1.RestartPolicyNever
		t.Spec.Containers[0].Args = []string{strconv.Itoa(int(jobRun / time.Second))}
	}
	return t
}

// jobSpec is the CronJob's Git jobTemplate spec.
func (k *kinds) jobSpec(w *kworkload) batchv1.JobSpec {
	s := batchv1.JobSpec{BackoffLimit: i32(0), Template: k.podTemplate(w)}
	if w.ttl {
		s.TTLSecondsAfterFinished = i32(5)
	}
	return s
}

// applyConfig creates (if missing) the objects of w's current Git revision, or the shared ConfigMap.
func (wd *world) applyKindsConfig(k *kinds, w *kworkload) error {
	ctx := nowCtx()
	if w.shared {
		return wd.createConfigMap(ctx, k.ns, k.sharedCM, map[string]string{cluster.LabelRevisioned: "true", cluster.LabelApp: "web", labelSoak: "1"})
	}
	l := map[string]string{cluster.LabelRevisioned: "true", cluster.LabelApp: w.name, labelSoak: strconv.Itoa(w.rev)}
	if err := wd.createConfigMap(ctx, k.ns, w.cm, l); err != nil {
		return err
	}
	secData := map[string]string{"TOKEN": "token of " + w.sec}
	created, err := wd.kube.CoreV1().Secrets(k.ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: w.sec, Labels: l}, StringData: secData}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create Secret %s: %w", w.sec, err)
	}
	if err == nil {
		wd.track(&tracked{uid: created.UID, key: objKey(k.ns, "Secret", w.sec), data: secData, labels: l})
	}
	return nil
}

func (wd *world) createConfigMap(ctx context.Context, ns, name string, l map[string]string) error {
	data := map[string]string{"app.conf": "config of " + name}
	created, err := wd.kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}, Data: data}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ConfigMap %s: %w", name, err)
	}
	if err == nil {
		wd.track(&tracked{uid: created.UID, key: objKey(ns, "ConfigMap", name), data: data, labels: l})
	}
	return nil
}

// setupKinds creates the every-kind namespace: the Node for the DaemonSet, the objects, then
// the workloads.
func (wd *world) setupKinds(k *kinds) error {
	if err := wd.setupNamespace(k.ns); err != nil {
		return err
	}
	if err := cluster.CreateReadyNode(nowCtx(), wd.kube, nodeName); err != nil {
		return err
	}
	k.sharedCM = contentName("web-shared-cm", k.ns+" shared")
	for _, w := range k.ws {
		if !w.shared {
			k.nextRevision(w)
		}
		if w.kind == kCronJob {
			w.ttl = true
		}
		if err := wd.applyKindsConfig(k, w); err != nil {
			return err
		}
		if _, err := wd.createKind(k, w); err != nil {
			return fmt.Errorf("create %s: %w", w, err)
		}
	}
	return nil
}

// createKind creates w from Git (kubectl apply of a missing object) and returns its UID.
func (wd *world) createKind(k *kinds, w *kworkload) (types.UID, error) {
	ctx := nowCtx()
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{cluster.LabelApp: w.name}}
	meta := metav1.ObjectMeta{Name: w.name, Namespace: k.ns}
	switch w.kind {
	case kDeployment:
		zero, one := intstr.FromInt32(0), intstr.FromInt32(1)
		d, err := wd.kube.AppsV1().Deployments(k.ns).Create(ctx, &appsv1.Deployment{ObjectMeta: meta,
			Spec: appsv1.DeploymentSpec{Replicas: i32(1), RevisionHistoryLimit: i32(1), Selector: sel, Template: k.podTemplate(w),
				Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
					RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: &zero, MaxSurge: &one}}}}, metav1.CreateOptions{})
		if err != nil {
			return "", err
		}
		return d.UID, nil
	case kStatefulSet:
		s, err := wd.kube.AppsV1().StatefulSets(k.ns).Create(ctx, &appsv1.StatefulSet{ObjectMeta: meta,
			Spec: appsv1.StatefulSetSpec{Replicas: i32(1), RevisionHistoryLimit: i32(2), ServiceName: w.name, Selector: sel,
				PodManagementPolicy: appsv1.ParallelPodManagement, Template: k.podTemplate(w)}}, metav1.CreateOptions{})
		if err != nil {
			return "", err
		}
		return s.UID, nil
	case kDaemonSet:
		d, err := wd.kube.AppsV1().DaemonSets(k.ns).Create(ctx, &appsv1.DaemonSet{ObjectMeta: meta,
			Spec: appsv1.DaemonSetSpec{RevisionHistoryLimit: i32(2), Selector: sel, Template: k.podTemplate(w)}}, metav1.CreateOptions{})
		if err != nil {
			return "", err
		}
		return d.UID, nil
	case kCronJob:
		c, err := wd.kube.BatchV1().CronJobs(k.ns).Create(ctx, &batchv1.CronJob{ObjectMeta: meta,
			Spec: batchv1.CronJobSpec{Schedule: "* * * * *", ConcurrencyPolicy: batchv1.AllowConcurrent, Suspend: &w.suspend,
				SuccessfulJobsHistoryLimit: i32(2), FailedJobsHistoryLimit: i32(1),
				JobTemplate: batchv1.JobTemplateSpec{Spec: k.jobSpec(w)}}}, metav1.CreateOptions{})
		if err != nil {
			return "", err
		}
		return c.UID, nil
	}
	return "", fmt.Errorf("unknown kind %s", w.kind)
}

// updateKind writes w's Git template (kubectl apply of a changed object; kubectl set image).
func (wd *world) updateKind(k *kinds, w *kworkload) error {
	ctx := nowCtx()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		switch w.kind {
		case kDeployment:
			d, err := wd.kube.AppsV1().Deployments(k.ns).Get(ctx, w.name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			d.Spec.Template = k.podTemplate(w)
			_, err = wd.kube.AppsV1().Deployments(k.ns).Update(ctx, d, metav1.UpdateOptions{})
			return err
		case kStatefulSet:
			s, err := wd.kube.AppsV1().StatefulSets(k.ns).Get(ctx, w.name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			s.Spec.Template = k.podTemplate(w)
			_, err = wd.kube.AppsV1().StatefulSets(k.ns).Update(ctx, s, metav1.UpdateOptions{})
			return err
		case kDaemonSet:
			d, err := wd.kube.AppsV1().DaemonSets(k.ns).Get(ctx, w.name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			d.Spec.Template = k.podTemplate(w)
			_, err = wd.kube.AppsV1().DaemonSets(k.ns).Update(ctx, d, metav1.UpdateOptions{})
			return err
		case kCronJob:
			c, err := wd.kube.BatchV1().CronJobs(k.ns).Get(ctx, w.name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			c.Spec.JobTemplate.Spec = k.jobSpec(w)
			c.Spec.Suspend = &w.suspend
			_, err = wd.kube.BatchV1().CronJobs(k.ns).Update(ctx, c, metav1.UpdateOptions{})
			return err
		}
		return fmt.Errorf("unknown kind %s", w.kind)
	})
}

// kindUID returns w's UID (empty and NotFound when it does not exist).
func (wd *world) kindUID(ctx context.Context, k *kinds, w *kworkload) (types.UID, error) {
	var m metav1.Object
	var err error
	switch w.kind {
	case kDeployment:
		m, err = wd.kube.AppsV1().Deployments(k.ns).Get(ctx, w.name, metav1.GetOptions{})
	case kStatefulSet:
		m, err = wd.kube.AppsV1().StatefulSets(k.ns).Get(ctx, w.name, metav1.GetOptions{})
	case kDaemonSet:
		m, err = wd.kube.AppsV1().DaemonSets(k.ns).Get(ctx, w.name, metav1.GetOptions{})
	case kCronJob:
		m, err = wd.kube.BatchV1().CronJobs(k.ns).Get(ctx, w.name, metav1.GetOptions{})
	}
	if err != nil {
		return "", err
	}
	return m.GetUID(), nil
}

// deleteKind deletes w (background propagation, UID precondition) and waits until it is gone.
func (wd *world) deleteKind(k *kinds, w *kworkload) (types.UID, error) {
	ctx := nowCtx()
	uid, err := wd.kindUID(ctx, k, w)
	if err != nil {
		return "", err
	}
	bg := metav1.DeletePropagationBackground
	opts := metav1.DeleteOptions{PropagationPolicy: &bg, Preconditions: &metav1.Preconditions{UID: &uid}}
	switch w.kind {
	case kDeployment:
		err = wd.kube.AppsV1().Deployments(k.ns).Delete(ctx, w.name, opts)
	case kStatefulSet:
		err = wd.kube.AppsV1().StatefulSets(k.ns).Delete(ctx, w.name, opts)
	case kDaemonSet:
		err = wd.kube.AppsV1().DaemonSets(k.ns).Delete(ctx, w.name, opts)
	case kCronJob:
		err = wd.kube.BatchV1().CronJobs(k.ns).Delete(ctx, w.name, opts)
	}
	if err != nil {
		return uid, err
	}
	for {
		if _, err := wd.kindUID(ctx, k, w); apierrors.IsNotFound(err) {
			return uid, nil
		}
		if ctx.Err() != nil {
			return uid, fmt.Errorf("%s still there after its delete", w)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// inGitKinds adds the every-kind namespace's current objects to keep.
func (k *kinds) inGit(keep map[string]bool) {
	keep["ConfigMap/"+k.sharedCM] = true
	for _, w := range k.ws {
		if !w.shared {
			keep["ConfigMap/"+w.cm], keep["Secret/"+w.sec] = true, true
		}
	}
}

// runJob is `kubectl create job --from=cronjob/<name>`: a Job from the CronJob's current
// jobTemplate, controlled by the CronJob.
func (wd *world) runJob(k *kinds) (string, error) {
	ctx := nowCtx()
	cj, err := wd.kube.BatchV1().CronJobs(k.ns).Get(ctx, k.cron.name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	k.jobs++
	yes := true
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-manual-%d", cj.Name, k.jobs), Namespace: k.ns,
		Annotations: map[string]string{"cronjob.kubernetes.io/instantiate": "manual"}, Labels: cj.Spec.JobTemplate.Labels,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "CronJob", Name: cj.Name, UID: cj.UID, Controller: &yes}}},
		Spec: cj.Spec.JobTemplate.Spec}
	if _, err := wd.kube.BatchV1().Jobs(k.ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		return job.Name, err
	}
	refs := cluster.PodConfigRefs(&job.Spec.Template.Spec)
	var names []string
	for _, r := range refs {
		if r.Name != staticName {
			names = append(names, r.String())
		}
	}
	ttl := "no TTL"
	if t := job.Spec.TTLSecondsAfterFinished; t != nil {
		ttl = fmt.Sprintf("ttlSecondsAfterFinished %d", *t)
	}
	return fmt.Sprintf("Job %s (%s; %s)", job.Name, strings.Join(names, ", "), ttl), nil
}

// deleteJob deletes a random Job of the namespace (background propagation).
func (wd *world) deleteJob(k *kinds) (string, error) {
	list, err := wd.kube.BatchV1().Jobs(k.ns).List(nowCtx(), metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	var live []batchv1.Job
	for _, j := range list.Items {
		if j.DeletionTimestamp == nil {
			live = append(live, j)
		}
	}
	if len(live) == 0 {
		return "no Job", nil
	}
	sort.Slice(live, func(i, j int) bool { return live[i].Name < live[j].Name })
	j := live[wd.rnd.Intn(len(live))]
	bg := metav1.DeletePropagationBackground
	uid := j.UID
	err = wd.kube.BatchV1().Jobs(k.ns).Delete(nowCtx(), j.Name, metav1.DeleteOptions{PropagationPolicy: &bg, Preconditions: &metav1.Preconditions{UID: &uid}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return "Job " + j.Name + " already gone", nil
	}
	state := "running"
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			state = string(c.Type)
		}
	}
	return fmt.Sprintf("Job %s (%s)", j.Name, state), err
}

func (wd *world) track(t *tracked) { wd.created[t.key] = t }

// --- the operations on the every-kind namespace ---

// gateKinds is what every sync of the every-kind namespace waits for, or the reason it is
// deferred: never while the apiserver is out or the controller mode has no leader, and every
// opted-in object a live user of the namespace references has an owner (at most 10 s).
func (s *soak) gateKinds() string {
	if !s.apiUp() {
		s.deferred["apiserver out"]++
		return "deferred: apiserver out"
	}
	s.mu.Lock()
	leaderOK := s.leaderOK
	s.mu.Unlock()
	if !leaderOK || s.leader() == nil {
		s.deferred["no controller-mode leader"]++
		return "deferred: no controller-mode leader"
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		snap, err := s.mon.list(nowCtx())
		if err == nil && len(unownedUsed(snap, s.kinds.ns)) == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return ""
}

// unownedUsed lists the opted-in objects of ns that a live user of any kind references and
// that have no owner reference at all.
func unownedUsed(snap *snapshot, ns string) []string {
	var out []string
	for key := range snap.used {
		o := snap.objs[key]
		if o == nil || o.meta.Namespace != ns || !o.optedIn() || len(o.meta.OwnerReferences) > 0 {
			continue
		}
		out = append(out, key)
	}
	sort.Strings(out)
	return out
}

// kindsOp runs one operation on the every-kind namespace.
func (s *soak) kindsOp(kind string) (detail, target string, err error) {
	k := s.kinds
	switch kind {
	case "setImage":
		// kubectl set image on one of the Deployments sharing the ConfigMap.
		w := k.deps[s.wd.rnd.Intn(len(k.deps))]
		if why := s.gateKinds(); why != "" {
			return why, k.ns + "/" + w.name, nil
		}
		w.image++
		return fmt.Sprintf("image :%d (shares ConfigMap %s)", w.image, k.sharedCM), k.ns + "/" + w.name, s.wd.updateKind(k, w)
	case "stsUpdate", "dsUpdate", "cronTemplate":
		w := k.sts
		switch kind {
		case "dsUpdate":
			w = k.ds
		case "cronTemplate":
			w = k.cron
		}
		target = k.ns + "/" + w.name
		if why := s.gateKinds(); why != "" {
			return why, target, nil
		}
		if kind == "cronTemplate" || s.wd.rnd.Float64() < 0.5 {
			detail = k.nextRevision(w)
			if kind == "cronTemplate" {
				// Every other jobTemplate has ttlSecondsAfterFinished 5.
				w.ttl = !w.ttl
				detail += fmt.Sprintf("; ttlSecondsAfterFinished: %v", w.ttl)
			}
		} else {
			w.image++
			detail = fmt.Sprintf("image :%d (config of rev %d)", w.image, w.rev)
		}
		s.mu.Lock()
		err = s.wd.applyKindsConfig(k, w)
		s.mu.Unlock()
		if err != nil {
			return detail, target, err
		}
		if err := s.wd.updateKind(k, w); err != nil {
			return detail, target, err
		}
		deleted, err := s.wd.pruneNS(k.ns)
		s.mu.Lock()
		s.applies++
		s.pruned += len(deleted)
		s.mu.Unlock()
		if len(deleted) > 0 {
			detail += "; prune deleted " + strings.Join(deleted, ", ")
		}
		return detail, target, err
	case "cronRun":
		target = k.ns + "/" + k.cron.name
		if !s.apiUp() {
			return "deferred: apiserver out", target, nil
		}
		detail, err = s.wd.runJob(k)
		return detail, target, err
	case "jobDelete":
		target = k.ns + "/" + k.cron.name
		if !s.apiUp() {
			return "deferred: apiserver out", target, nil
		}
		detail, err = s.wd.deleteJob(k)
		return detail, target, err
	case "reapply":
		return s.reapply(k, k.ws[s.wd.rnd.Intn(len(k.ws))])
	}
	return "skip", "", nil
}

// reapply is a delete and re-apply of a workload with its config unchanged (kubectl delete of
// the workload alone, then kubectl apply; Argo CD Replace=true): deleted with background
// propagation and waited for until gone, then created again from Git with a new UID. Its
// objects must still be there, the same objects (UIDs) as before: the anchor of the deleted
// workload keeps them for the anchor grace (invariant 8).
func (s *soak) reapply(k *kinds, w *kworkload) (string, string, error) {
	target := k.ns + "/" + w.name + " (" + w.kind + ")"
	if why := s.gateKinds(); why != "" {
		return why, target, nil
	}
	before := map[cluster.ConfigRef]types.UID{}
	for _, r := range w.refs(k) {
		if uid, err := s.configUID(k.ns, r); err == nil {
			before[r] = uid
		}
	}
	t0 := time.Now()
	old, err := s.wd.deleteKind(k, w)
	detail := fmt.Sprintf("deleted %s (uid %s)", w, short(old))
	if err != nil {
		return detail, target, err
	}
	uid, err := s.wd.createKind(k, w)
	gap := time.Since(t0)
	detail += fmt.Sprintf("; re-applied after %v (uid %s)", gap.Round(time.Millisecond), short(uid))
	if err != nil {
		return detail, target, err
	}
	s.mu.Lock()
	k.reapplied[w.kind]++
	s.mu.Unlock()
	var lost []string
	for r, was := range before {
		now, err := s.configUID(k.ns, r)
		switch {
		case apierrors.IsNotFound(err):
			lost = append(lost, r.String()+" deleted")
		case err == nil && now != was:
			lost = append(lost, r.String()+" deleted and created again")
		}
	}
	sort.Strings(lost)
	if len(lost) > 0 && gap < anchorGrace {
		s.mon.violation(8, "reapply "+target+" "+t0.String(), fmt.Sprintf("%s deleted and re-applied with its config unchanged after %v (anchor grace %v), but %s: the re-applied workload's pods fail with CreateContainerConfigError",
			w, gap.Round(time.Millisecond), anchorGrace, strings.Join(lost, ", ")))
		// GitOps creates what is missing; the soak goes on.
		s.mu.Lock()
		err = s.wd.applyKindsConfig(k, w)
		s.mu.Unlock()
	}
	if len(lost) > 0 {
		return detail + "; " + strings.Join(lost, ", "), target, err
	}
	return detail + "; its objects kept", target, err
}

func (s *soak) configUID(ns string, r cluster.ConfigRef) (types.UID, error) {
	if r.Kind == "Secret" {
		x, err := s.kube.CoreV1().Secrets(ns).Get(nowCtx(), r.Name, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		return x.UID, nil
	}
	x, err := s.kube.CoreV1().ConfigMaps(ns).Get(nowCtx(), r.Name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	return x.UID, nil
}

// suspendCron suspends the CronJob (the quiet phase: no Job starts, no owner is added).
func (s *soak) suspendCron() error {
	s.kinds.cron.suspend = true
	return s.wd.updateKind(s.kinds, s.kinds.cron)
}
