// Package job is the command-line (Job) mode: WaitAndAttach waits until the Rollouts
// controller has created the ReplicaSet of a Rollout's current template (newrs.OfRollout), then
// hands the listed ConfigMaps and Secrets to the core's Attacher.Reconcile. Its flags are
// plugin/cmd's.
package job

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/plugin/clientset"
	"github.com/configmap-attacher/configmap-attacher/plugin/newrs"

	rolloutsclient "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/util/wait"
)

// jobRBACHint is the example RBAC of the command-line (Job) mode.
const jobRBACHint = "examples/job.yaml"

// DefaultPollInterval is the Job's pause between checks while it waits.
const DefaultPollInterval = 2 * time.Second

// Request is one run of the command-line (Job) mode: attach Config's objects to the
// ReplicaSet of the current pod template of Rollout Namespace/Rollout once the Argo Rollouts
// controller has created it.
type Request struct {
	Clients   clientset.Clients
	Namespace string
	Rollout   string
	// Config holds the objects, allowUnreferenced, discover, dryRun and the timeout of the
	// whole wait (Config.Timeout; DefaultTimeout when zero).
	Config plugin.Config
	Policy plugin.Policy
	// ControllerLeases are the controller mode's leader Leases (-controller-lease): config that
	// other workloads share is attached only where a live controller maintains it.
	ControllerLeases []plugin.LeaseRef
	// ExpectTemplateAnnotation, when its Key is set, counts the Rollout as settled only once
	// its pod template (for workloadRef, the Deployment's) carries that annotation and value.
	ExpectTemplateAnnotation TemplateAnnotation
	Log                      logrus.FieldLogger
	// PollInterval is the pause between checks (DefaultPollInterval when zero).
	PollInterval time.Duration
	// CreationWait is how long a listed object that does not exist yet is waited for once the
	// ReplicaSet is there (plugin.DefaultCreationWait when zero).
	CreationWait time.Duration
}

// TemplateAnnotation is an annotation KEY=VALUE a pod template must carry.
type TemplateAnnotation struct{ Key, Value string }

// WaitAndAttach is the Job mode: it polls until the Rollout's new ReplicaSet is there, then
// attaches, and returns the message to print ("attached 2 ConfigMaps to ReplicaSet web-7f9c2d
// of Rollout shop/web"). Run as an Argo CD Sync hook that may start before the new spec is
// applied, it therefore waits for the new ReplicaSet instead of attaching to the previous one.
// Unless DryRun, it records an event on the Rollout (Attached or AttachFailed) before it
// returns. Errors are permanent problems (IsPermanent) or the timeout naming what it waited for.
func WaitAndAttach(ctx context.Context, r Request) (string, error) {
	log := r.Log
	if log == nil {
		log = logrus.StandardLogger()
	}
	cfg := r.Config
	if cfg.Timeout.Duration <= 0 {
		cfg.Timeout.Duration = plugin.DefaultTimeout
	}
	interval := r.PollInterval
	if interval <= 0 {
		interval = DefaultPollInterval
	}
	cl := r.Clients
	core := cl.Core()
	w := &waiter{attacher: &plugin.Attacher{Client: core.Kube, Meta: core.Meta, Log: log, RBACHint: jobRBACHint,
		CreationWait: r.CreationWait},
		rollouts: cl.Rollouts, kube: cl.Kube, cfg: cfg, policy: r.Policy, leases: r.ControllerLeases, expect: r.ExpectTemplateAnnotation, ns: r.Namespace, name: r.Rollout, log: log,
		events: &plugin.APIEvents{Client: func() (plugin.Clients, error) { return core, nil }, Log: log}}
	return w.run(ctx, interval)
}

// waiter polls until the Rollout's new ReplicaSet is there and uses every listed object,
// then attaches (WaitAndAttach).
type waiter struct {
	attacher *plugin.Attacher
	rollouts rolloutsclient.Interface
	kube     kubernetes.Interface
	cfg      plugin.Config
	policy   plugin.Policy
	leases   []plugin.LeaseRef
	expect   TemplateAnnotation
	ns, name string
	log      logrus.FieldLogger
	reason   string // why we are still waiting, for the timeout message
	events   plugin.EventRecorder
	rollout  *v1alpha1.Rollout // last seen, for events
}

func (w *waiter) run(ctx context.Context, interval time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.Timeout.Duration)
	defer cancel()
	var msg string
	err := wait.PollUntilContextCancel(ctx, interval, true, func(ctx context.Context) (bool, error) {
		done, m, err := w.try(ctx)
		switch {
		case err == nil:
			msg = m
			return done, nil
		case plugin.IsPermanent(err):
			return false, err
		default:
			w.reason = err.Error()
			w.log.WithError(err).Warn("transient error; retrying")
			return false, nil
		}
	})
	if err != nil && !plugin.IsPermanent(err) {
		err = fmt.Errorf("timed out after %s waiting for %s", w.cfg.Timeout.Duration, w.reason)
	}
	if w.rollout != nil && !w.cfg.DryRun {
		// Synchronous: the process has written its events when it exits.
		if err != nil {
			w.events.Event(w.rollout, corev1.EventTypeWarning, plugin.ReasonAttachFailed, err.Error())
		} else {
			w.events.Event(w.rollout, corev1.EventTypeNormal, plugin.ReasonAttached, msg)
		}
	}
	return msg, err
}

func (w *waiter) waitFor(reason string) (bool, string, error) {
	if reason != w.reason {
		w.log.Info("waiting for " + reason)
	}
	w.reason = reason
	return false, "", nil
}

func (w *waiter) try(ctx context.Context) (bool, string, error) {
	var ro *v1alpha1.Rollout
	err := w.attacher.Call(ctx, func(ctx context.Context) error {
		var err error
		ro, err = w.rollouts.ArgoprojV1alpha1().Rollouts(w.ns).Get(ctx, w.name, metav1.GetOptions{})
		return err
	})
	switch {
	case apierrors.IsNotFound(err):
		return w.waitFor(fmt.Sprintf("Rollout %s/%s to exist", w.ns, w.name))
	case apierrors.IsForbidden(err):
		return false, "", &plugin.FailError{Msg: fmt.Sprintf("forbidden to get rollouts.argoproj.io %s/%s: %s; apply the Job RBAC in "+jobRBACHint, w.ns, w.name, plugin.APIMessage(err))}
	case err != nil:
		return false, "", fmt.Errorf("getting Rollout %s/%s: %w", w.ns, w.name, err)
	}
	w.rollout = ro
	for _, c := range ro.Status.Conditions {
		if c.Type == v1alpha1.InvalidSpec && c.Status == corev1.ConditionTrue {
			return false, "", &plugin.FailError{Msg: fmt.Sprintf("Rollout %s/%s has condition InvalidSpec=True (%s: %s): the controller will not create its ReplicaSet until the spec is fixed", w.ns, w.name, c.Reason, c.Message)}
		}
	}
	if ro.Status.ObservedGeneration != strconv.FormatInt(ro.Generation, 10) {
		return w.waitFor(fmt.Sprintf("the Rollouts controller to observe generation %d of Rollout %s/%s (observed: %q)", ro.Generation, w.ns, w.name, ro.Status.ObservedGeneration))
	}
	// The controller's own view (ResolveWorkloadRef): for workloadRef, the Deployment's template
	// and (when the Rollout has none) selector stand in for the Rollout's.
	rr, err := plugin.ResolveWorkloadRef(ctx, w.getDeployment, ro)
	if err != nil {
		wait, err := w.workloadError(ro, err)
		if wait != "" {
			return w.waitFor(wait)
		}
		return false, "", err
	}
	if wait := w.workloadObserved(ro, rr.Deployment); wait != "" {
		return w.waitFor(wait)
	}
	wl, resolved := rr.Workload, rr.Rollout
	if w.expect.Key != "" {
		if v, ok := resolved.Spec.Template.Annotations[w.expect.Key]; !ok || v != w.expect.Value {
			return w.waitFor(fmt.Sprintf("the pod template of Rollout %s/%s to carry annotation %s=%s (-expect-template-annotation; now: %q): the new spec is not applied yet", w.ns, w.name, w.expect.Key, w.expect.Value, v))
		}
	}
	// Each poll lists only the Rollout's own ReplicaSets until the target exists (read.go).
	rss, err := w.attacher.ReadOwnReplicaSets(ctx, wl)
	if err != nil {
		return false, "", err
	}
	target := newrs.OfRollout(resolved, rss)
	if target == nil {
		return w.waitFor(fmt.Sprintf("the Rollouts controller to create the ReplicaSet of the current pod template of Rollout %s/%s (status.currentPodHash %q names an older one)", w.ns, w.name, ro.Status.CurrentPodHash))
	}
	// The ReplicaSet of the current spec exists: the rule table decides at once; the
	// namespace's users are read only for objects no live controller maintains.
	req := plugin.Request{Workload: wl, ReplicaSets: rss, Target: target, Objects: w.cfg.Objects(), Source: "-configmaps/-secrets",
		AllowUnreferenced: w.cfg.AllowUnreferenced, Policy: w.policy, DryRun: w.cfg.DryRun,
		Maintainers: &plugin.Maintainers{Leases: w.leases},
		ReadUsers: func(ctx context.Context) (plugin.UserView, error) {
			return w.attacher.ReadUsage(ctx, w.ns, plugin.RefOf(plugin.KindRollout, ro))
		}}
	if w.cfg.Discover != nil {
		if req.Discover, err = w.cfg.Discover.LabelSelector(); err != nil {
			return false, "", &plugin.FailError{Msg: "-selector: " + err.Error()}
		}
	}
	res, err := w.attacher.Reconcile(ctx, req)
	for _, warn := range res.Warnings {
		w.log.Warn(warn)
	}
	if err != nil {
		return false, "", err
	}
	where := " of Rollout " + w.ns + "/" + w.name
	if w.cfg.DryRun {
		return true, res.Message + " (Rollout " + w.ns + "/" + w.name + ")", nil
	}
	// "attached 2 ConfigMaps to ReplicaSet web-7f9c2d of Rollout shop/web; …", as the original tool said.
	return true, strings.Replace(res.Message, "to ReplicaSet "+target.Name, "to ReplicaSet "+target.Name+where, 1), nil
}

// getDeployment is the DeploymentGetter the waiter gives ResolveWorkloadRef: one read with
// the Attacher's deadline and retries of transient errors.
func (w *waiter) getDeployment(ctx context.Context, namespace, name string) (*appsv1.Deployment, error) {
	var d *appsv1.Deployment
	err := w.attacher.Call(ctx, func(ctx context.Context) error {
		var err error
		d, err = w.kube.AppsV1().Deployments(namespace).Get(ctx, name, metav1.GetOptions{})
		return err
	})
	return d, err
}

// workloadError words a failed workloadRef resolution: a missing Deployment is waited for
// (the returned reason), a forbidden read or an unsupported kind fails the run.
func (w *waiter) workloadError(ro *v1alpha1.Rollout, err error) (string, error) {
	name := ro.Spec.WorkloadRef.Name
	switch {
	case plugin.IsPermanent(err): // spec.workloadRef.kind is not Deployment
		return "", err
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("Deployment %s/%s named by spec.workloadRef to exist", ro.Namespace, name), nil
	case apierrors.IsForbidden(err):
		return "", &plugin.FailError{Msg: fmt.Sprintf("forbidden to get deployments.apps %s/%s: %s; apply the Job RBAC in "+jobRBACHint, ro.Namespace, name, plugin.APIMessage(err))}
	default:
		return "", fmt.Errorf("getting Deployment %s/%s: %w", ro.Namespace, name, err)
	}
}

// workloadObserved is why a workloadRef Rollout is not settled yet: the controller must have
// observed the Deployment's latest generation ("" when it has, or without a workloadRef).
func (w *waiter) workloadObserved(ro *v1alpha1.Rollout, d *appsv1.Deployment) string {
	if d == nil || ro.Status.WorkloadObservedGeneration == strconv.FormatInt(d.Generation, 10) {
		return ""
	}
	return fmt.Sprintf("the Rollouts controller to observe generation %d of Deployment %s/%s (observed: %q)", d.Generation, ro.Namespace, d.Name, ro.Status.WorkloadObservedGeneration)
}
