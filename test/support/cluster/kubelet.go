package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"
)

// FakeKubelet stands in for the kubelets of a cluster without nodes: kube-controller-manager's
// replicaset controller creates pods that nothing schedules or runs. For each pod it
//
//   - checks, as the kubelet does before starting containers, that every ConfigMap and Secret
//     the pod uses (volumes, projected sources, env valueFrom, envFrom; optional references
//     excepted) exists; if one is missing the pod gets phase Pending, Ready=False and
//     containers waiting with reason CreateContainerConfigError, and is checked again every
//     second;
//   - otherwise patches the status subresource to phase Running with Ready, ContainersReady,
//     Initialized and PodScheduled True, a pod IP and running containers;
//   - force-deletes (grace period 0) a pod with a deletionTimestamp;
//   - kills the process it runs for a pod (below) when the pod is deleted;
//   - for a pod whose first container's image is registered with RunImage (a Job of our
//     image), runs that local binary once with the container's command and args ($(VAR)
//     expanded from its env, as the kubelet does), its env, and KUBECONFIG set to a kubeconfig
//     of the pod's ServiceAccount; the pod is Running meanwhile and then Succeeded or Failed
//     with the exit code, so the Job controller completes or retries the Job for real.
//
// No Node is needed: the replicaset controller and the Rollouts controller only read pod
// status. The checks use its own small walker, not the plugin's.
type FakeKubelet struct {
	cs     kubernetes.Interface
	cancel context.CancelFunc
	done   chan struct{}
	ip     atomic.Uint32
	errors atomic.Int32

	mu       sync.Mutex
	pods     map[string]*corev1.Pod // ns/name -> latest seen
	failures map[string]string      // ns/name -> last CreateContainerConfigError message
	runners  map[string]PodRunner   // image repository (no tag) -> runner
	runs     map[types.UID]*PodRun  // pods started by a runner
}

// PodRunner makes the fake kubelet run the pods of an image as a local process (RunImage).
type PodRunner struct {
	// Binary is the local executable that stands in for the image's entrypoint.
	Binary string
	// Kubeconfig returns a kubeconfig file for ServiceAccount ns/name: the identity the pod
	// would get from its projected token.
	Kubeconfig func(ctx context.Context, ns, serviceAccount string) (string, error)
	// LogDir receives one <namespace>_<pod>.log per run (stdout and stderr).
	LogDir string
	// Timeout bounds a run (default 10 minutes); the pod then fails.
	Timeout time.Duration
}

// PodRun is one run of a PodRunner's binary for a pod.
type PodRun struct {
	Namespace, Pod string
	Args           []string
	Started        time.Time
	Finished       time.Time // zero while running
	ExitCode       int
	LogPath        string
	cancel         context.CancelFunc
}

// StartFakeKubelet starts the loop; Stop ends it.
func StartFakeKubelet(cs kubernetes.Interface) *FakeKubelet {
	ctx, cancel := context.WithCancel(context.Background())
	k := &FakeKubelet{cs: cs, cancel: cancel, done: make(chan struct{}), failures: map[string]string{}, pods: map[string]*corev1.Pod{},
		runners: map[string]PodRunner{}, runs: map[types.UID]*PodRun{}}
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		k.watch(ctx, q)
		q.ShutDown()
	}()
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				key, quit := q.Get()
				if quit {
					return
				}
				requeue, err := k.sync(ctx, key)
				switch {
				case err != nil && ctx.Err() == nil:
					k.logError(key, err)
					q.AddRateLimited(key)
				case requeue > 0:
					q.Forget(key)
					q.AddAfter(key, requeue)
				default:
					q.Forget(key)
				}
				q.Done(key)
			}
		}()
	}
	go func() {
		wg.Wait()
		close(k.done)
	}()
	return k
}

// watch keeps k.pods in step with the apiserver (list, then watch; list again when the watch
// ends) and queues every pod it sees change. (client-go's informers would pull modules this
// module does not require.)
func (k *FakeKubelet) watch(ctx context.Context, q workqueue.TypedRateLimitingInterface[string]) {
	for ctx.Err() == nil {
		list, err := k.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil {
			sleepCtx(ctx, 500*time.Millisecond)
			continue
		}
		k.mu.Lock()
		k.pods = map[string]*corev1.Pod{}
		for i := range list.Items {
			p := &list.Items[i]
			k.pods[p.Namespace+"/"+p.Name] = p
			q.Add(p.Namespace + "/" + p.Name)
		}
		k.mu.Unlock()
		w, err := k.cs.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion, AllowWatchBookmarks: true})
		if err != nil {
			sleepCtx(ctx, 500*time.Millisecond)
			continue
		}
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				break // an error event: list again
			}
			key := p.Namespace + "/" + p.Name
			k.mu.Lock()
			switch ev.Type {
			case watch.Added, watch.Modified:
				k.pods[key] = p
			case watch.Deleted:
				delete(k.pods, key)
				// A pod bound to no node (none is, here) is deleted at once, without the graceful
				// phase whose deletionTimestamp sync acts on: its process stops here, as the
				// kubelet's container would, instead of running on until its Timeout (a
				// scaled-down controller kept renewing its Lease for minutes).
				if r := k.runs[p.UID]; r != nil && r.Finished.IsZero() {
					r.cancel()
				}
			}
			k.mu.Unlock()
			if ev.Type != watch.Bookmark {
				q.Add(key)
			}
		}
		w.Stop()
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func (k *FakeKubelet) logError(key string, err error) {
	if n := k.errors.Add(1); n <= 20 {
		fmt.Fprintf(os.Stderr, "test/support/cluster: fake kubelet: pod %s: %v\n", key, err)
	}
}

// Stop ends the loop and waits for it; runs still going are killed.
func (k *FakeKubelet) Stop() {
	k.cancel()
	<-k.done
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, r := range k.runs {
		r.cancel()
	}
}

// RunImage registers r for pods whose first container's image is image (a repository: any tag
// or digest matches). Register before such pods exist.
func (k *FakeKubelet) RunImage(image string, r PodRunner) {
	if r.Timeout == 0 {
		r.Timeout = 10 * time.Minute
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.runners[image] = r
}

// Runs returns a copy of every run so far in namespace ns, by start time.
func (k *FakeKubelet) Runs(ns string) []PodRun {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []PodRun
	for _, r := range k.runs {
		if r.Namespace == ns {
			c := *r
			c.cancel = nil
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Started.Before(out[j].Started) })
	return out
}

// imageRepository strips a tag or digest from an image reference.
func imageRepository(image string) string {
	if i := strings.Index(image, "@"); i >= 0 {
		image = image[:i]
	}
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		image = image[:i]
	}
	return image
}

func (k *FakeKubelet) runnerFor(pod *corev1.Pod) (PodRunner, bool) {
	if len(pod.Spec.Containers) == 0 {
		return PodRunner{}, false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	r, ok := k.runners[imageRepository(pod.Spec.Containers[0].Image)]
	return r, ok
}

// runPod starts the runner's binary for the pod once (its status Running meanwhile), then
// writes Succeeded or Failed with the exit code.
func (k *FakeKubelet) runPod(ctx context.Context, pod *corev1.Pod, r PodRunner) error {
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return nil
	}
	k.mu.Lock()
	_, started := k.runs[pod.UID]
	k.mu.Unlock()
	if started {
		return nil
	}
	ctr := pod.Spec.Containers[0]
	env := map[string]string{}
	var envList []string
	for _, e := range ctr.Env {
		v := e.Value
		if e.ValueFrom != nil {
			if e.ValueFrom.FieldRef == nil {
				continue
			}
			v = fieldValue(pod, e.ValueFrom.FieldRef.FieldPath)
		} else {
			v = expandVars(v, env)
		}
		env[e.Name] = v
		envList = append(envList, e.Name+"="+v)
	}
	var args []string
	for _, a := range append(append([]string(nil), ctr.Command...), ctr.Args...) {
		args = append(args, expandVars(a, env))
	}
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	kubeconfig, err := r.Kubeconfig(ctx, pod.Namespace, sa)
	if err != nil {
		return fmt.Errorf("kubeconfig for ServiceAccount %s/%s: %w", pod.Namespace, sa, err)
	}
	if err := os.MkdirAll(r.LogDir, 0o755); err != nil {
		return err
	}
	logPath := filepath.Join(r.LogDir, pod.Namespace+"_"+pod.Name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	if err := k.updateStatus(ctx, pod, k.runningStatus(pod)); err != nil {
		logf.Close()
		return err
	}
	rctx, cancel := context.WithTimeout(context.Background(), r.Timeout)
	run := &PodRun{Namespace: pod.Namespace, Pod: pod.Name, Args: args, Started: time.Now(), LogPath: logPath, cancel: cancel}
	cmd := exec.CommandContext(rctx, r.Binary, args...)
	// Only what the container would have: its env and the pod's identity (no in-cluster
	// variables, so the binary uses KUBECONFIG).
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir(), "KUBECONFIG=" + kubeconfig}, envList...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		cancel()
		logf.Close()
		return fmt.Errorf("run %s for pod %s/%s: %w", r.Binary, pod.Namespace, pod.Name, err)
	}
	k.mu.Lock()
	k.runs[pod.UID] = run
	k.mu.Unlock()
	uid, ns, name := pod.UID, pod.Namespace, pod.Name
	go func() {
		defer cancel()
		_ = cmd.Wait()
		logf.Close()
		code := cmd.ProcessState.ExitCode()
		if code < 0 {
			code = 137
		}
		k.mu.Lock()
		run.Finished, run.ExitCode = time.Now(), code
		k.mu.Unlock()
		// Report the exit on the pod's latest version (retrying conflicts and transient errors).
		for i := 0; i < 50; i++ {
			sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
			cur, err := k.cs.CoreV1().Pods(ns).Get(sctx, name, metav1.GetOptions{})
			if err == nil && cur.UID == uid {
				err = k.updateStatus(sctx, cur, terminatedStatus(cur, code))
			}
			scancel()
			if err == nil || apierrors.IsNotFound(err) {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	return nil
}

// fieldValue resolves the downward-API field paths the examples use.
func fieldValue(pod *corev1.Pod, path string) string {
	switch path {
	case "metadata.namespace":
		return pod.Namespace
	case "metadata.name":
		return pod.Name
	case "metadata.uid":
		return string(pod.UID)
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName
	}
	for prefix, m := range map[string]map[string]string{"metadata.labels": pod.Labels, "metadata.annotations": pod.Annotations} {
		if strings.HasPrefix(path, prefix+"['") && strings.HasSuffix(path, "']") {
			return m[strings.TrimSuffix(strings.TrimPrefix(path, prefix+"['"), "']")]
		}
	}
	return ""
}

// expandVars replaces $(NAME) with env[NAME] when defined, $$ with $, as the kubelet does for
// command, args and env values.
func expandVars(s string, env map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '$' && i+1 < len(s) {
			if s[i+1] == '$' {
				b.WriteByte('$')
				i++
				continue
			}
			if s[i+1] == '(' {
				if j := strings.IndexByte(s[i:], ')'); j > 0 {
					if v, ok := env[s[i+2:i+j]]; ok {
						b.WriteString(v)
						i += j
						continue
					}
				}
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func terminatedStatus(pod *corev1.Pod, code int) corev1.PodStatus {
	now := metav1.Now()
	st := *pod.Status.DeepCopy()
	st.Phase, st.Reason = corev1.PodSucceeded, ""
	reason := "Completed"
	if code != 0 {
		st.Phase, reason = corev1.PodFailed, "Error"
	}
	st.Conditions = nil
	for _, t := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized} {
		st.Conditions = append(st.Conditions, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now})
	}
	for _, t := range []corev1.PodConditionType{corev1.ContainersReady, corev1.PodReady} {
		st.Conditions = append(st.Conditions, corev1.PodCondition{Type: t, Status: corev1.ConditionFalse, Reason: "PodCompleted", LastTransitionTime: now})
	}
	st.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: "fake://" + c.Image,
			ContainerID: "fake://" + string(pod.UID) + "/" + c.Name,
			State:       corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: int32(code), Reason: reason, FinishedAt: now}}})
	}
	return st
}

// ConfigError returns the CreateContainerConfigError message last given to pod ns/name ("" if none).
func (k *FakeKubelet) ConfigError(ns, name string) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.failures[ns+"/"+name]
}

func (k *FakeKubelet) sync(ctx context.Context, key string) (time.Duration, error) {
	k.mu.Lock()
	pod := k.pods[key]
	k.mu.Unlock()
	if pod == nil {
		return 0, nil
	}
	ns, name := pod.Namespace, pod.Name
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if pod.DeletionTimestamp != nil {
		k.mu.Lock()
		if r := k.runs[pod.UID]; r != nil && r.Finished.IsZero() {
			r.cancel()
		}
		k.mu.Unlock()
		zero := int64(0)
		err := k.cs.CoreV1().Pods(ns).Delete(rctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero,
			Preconditions: &metav1.Preconditions{UID: &pod.UID}})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return 0, nil
		}
		return 0, err
	}
	missing, err := k.missingConfig(rctx, pod)
	if err != nil {
		return 0, err
	}
	if missing != "" {
		k.mu.Lock()
		k.failures[key] = missing
		k.mu.Unlock()
		if !HasWaitingReason(pod, "CreateContainerConfigError") {
			st := failedStatus(pod, missing)
			if err := k.updateStatus(rctx, pod, st); err != nil {
				return 0, err
			}
		}
		return time.Second, nil // the kubelet retries; so do we
	}
	k.mu.Lock()
	delete(k.failures, key)
	k.mu.Unlock()
	if r, ok := k.runnerFor(pod); ok {
		return 0, k.runPod(ctx, pod, r)
	}
	if PodReady(pod) && pod.Status.Phase == corev1.PodRunning {
		return 0, nil
	}
	return 0, k.updateStatus(rctx, pod, k.runningStatus(pod))
}

func (k *FakeKubelet) updateStatus(ctx context.Context, pod *corev1.Pod, st corev1.PodStatus) error {
	p := pod.DeepCopy()
	p.Status = st
	_, err := k.cs.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func (k *FakeKubelet) runningStatus(pod *corev1.Pod) corev1.PodStatus {
	now := metav1.Now()
	ip := pod.Status.PodIP
	if ip == "" {
		n := k.ip.Add(1)
		ip = fmt.Sprintf("10.%d.%d.%d", 100+(n>>16)&0x7f, (n>>8)&0xff, n&0xff)
	}
	st := corev1.PodStatus{
		Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
		HostIP: "127.0.0.1", HostIPs: []corev1.HostIP{{IP: "127.0.0.1"}},
		StartTime: &now, QOSClass: qosClass(pod),
	}
	for _, t := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		st.Conditions = append(st.Conditions, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now})
	}
	started := true
	for _, c := range pod.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: "fake://" + c.Image, ContainerID: "fake://" + string(pod.UID) + "/" + c.Name,
			Ready: true, Started: &started, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	return st
}

// qosClass keeps the class the apiserver set at creation (immutable: a pod with resources is
// Burstable or Guaranteed); BestEffort when unset.
func qosClass(pod *corev1.Pod) corev1.PodQOSClass {
	if pod.Status.QOSClass != "" {
		return pod.Status.QOSClass
	}
	return corev1.PodQOSBestEffort
}

func failedStatus(pod *corev1.Pod, msg string) corev1.PodStatus {
	now := metav1.Now()
	st := corev1.PodStatus{Phase: corev1.PodPending, HostIP: "127.0.0.1", HostIPs: []corev1.HostIP{{IP: "127.0.0.1"}}, StartTime: &now, QOSClass: qosClass(pod)}
	st.Conditions = []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.ContainersReady, Status: corev1.ConditionFalse, Reason: "ContainersNotReady", LastTransitionTime: now},
		{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "ContainersNotReady", LastTransitionTime: now},
	}
	for _, c := range pod.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError", Message: msg}}})
	}
	return st
}

// HasWaitingReason reports whether a container of the pod is waiting with reason (e.g.
// CreateContainerConfigError).
func HasWaitingReason(pod *corev1.Pod, reason string) bool {
	for _, s := range pod.Status.ContainerStatuses {
		if s.State.Waiting != nil && s.State.Waiting.Reason == reason {
			return true
		}
	}
	return false
}

// PodReady reports whether the pod's Ready condition is True.
func PodReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// missingConfig returns a kubelet-like message for the first required ConfigMap or Secret
// the pod uses that does not exist ("" when all exist).
func (k *FakeKubelet) missingConfig(ctx context.Context, pod *corev1.Pod) (string, error) {
	for _, r := range PodConfigRefs(&pod.Spec) {
		var err error
		if r.Kind == "Secret" {
			_, err = k.cs.CoreV1().Secrets(pod.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
		} else {
			_, err = k.cs.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
		}
		if apierrors.IsNotFound(err) {
			if r.Kind == "Secret" {
				return fmt.Sprintf("secret %q not found", r.Name), nil
			}
			return fmt.Sprintf("configmap %q not found", r.Name), nil
		}
		if err != nil {
			return "", err
		}
	}
	return "", nil
}

// ConfigRef is a ConfigMap or Secret a pod requires.
type ConfigRef struct{ Kind, Name string }

// String is "Kind/name".
func (r ConfigRef) String() string { return r.Kind + "/" + r.Name }

// ConfigMapRef is ConfigMap name as a ConfigRef.
func ConfigMapRef(name string) ConfigRef { return ConfigRef{Kind: "ConfigMap", Name: name} }

// SecretRef is Secret name as a ConfigRef.
func SecretRef(name string) ConfigRef { return ConfigRef{Kind: "Secret", Name: name} }

// PodConfigRefs lists the non-optional ConfigMaps and Secrets of a pod spec: volumes (also
// projected), env valueFrom and envFrom of all containers. (Independent of the plugin's walker.)
func PodConfigRefs(spec *corev1.PodSpec) []ConfigRef {
	seen := map[ConfigRef]bool{}
	var out []ConfigRef
	add := func(kind, name string, optional *bool) {
		r := ConfigRef{kind, name}
		if name == "" || (optional != nil && *optional) || seen[r] {
			return
		}
		seen[r] = true
		out = append(out, r)
	}
	for _, v := range spec.Volumes {
		if v.ConfigMap != nil {
			add("ConfigMap", v.ConfigMap.Name, v.ConfigMap.Optional)
		}
		if v.Secret != nil {
			add("Secret", v.Secret.SecretName, v.Secret.Optional)
		}
		if v.Projected != nil && !strings.HasPrefix(v.Name, "kube-api-access-") {
			// kube-api-access-* is the ServiceAccount token volume the admission plugin adds; its
			// kube-root-ca.crt comes from a controller this cluster does not run.
			for _, s := range v.Projected.Sources {
				if s.ConfigMap != nil {
					add("ConfigMap", s.ConfigMap.Name, s.ConfigMap.Optional)
				}
				if s.Secret != nil {
					add("Secret", s.Secret.Name, s.Secret.Optional)
				}
			}
		}
	}
	containers := append(append([]corev1.Container(nil), spec.InitContainers...), spec.Containers...)
	for _, c := range containers {
		for _, e := range c.EnvFrom {
			if e.ConfigMapRef != nil {
				add("ConfigMap", e.ConfigMapRef.Name, e.ConfigMapRef.Optional)
			}
			if e.SecretRef != nil {
				add("Secret", e.SecretRef.Name, e.SecretRef.Optional)
			}
		}
		for _, e := range c.Env {
			if e.ValueFrom == nil {
				continue
			}
			if r := e.ValueFrom.ConfigMapKeyRef; r != nil {
				add("ConfigMap", r.Name, r.Optional)
			}
			if r := e.ValueFrom.SecretKeyRef; r != nil {
				add("Secret", r.Name, r.Optional)
			}
		}
	}
	return out
}
