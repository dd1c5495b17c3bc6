// Package step is the step plugin mode: a canary step that the Argo Rollouts controller runs
// through go-plugin (rpc.Serve). It finds the ReplicaSet being rolled out, hands the step
// config's objects to the core (plugin.Attacher.Reconcile) and reports the verdict as the
// step's phase, message and Status.
package step

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	rolloutsrpc "github.com/argoproj/argo-rollouts/rollout/steps/plugin/rpc"

	"github.com/configmap-attacher/configmap-attacher/plugin"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/util/wait"
)

// RequeueAfter is how soon a waiting step asks to be called again. The controller ignores
// values up to 10 s (and then waits 30 s), so it must be above that floor.
const RequeueAfter = 15 * time.Second

// RunDeadline bounds one Run call: the controller's worker waits for it, and ten Rollouts at
// this step would otherwise hold all ten default workers while the apiserver hangs.
const RunDeadline = 20 * time.Second

// Status is the JSON object the step returns as its Status; the controller stores it in
// status.canary.stepPluginStatuses[].status and passes it back on the next call.
type Status struct {
	ReplicaSet    string             `json:"replicaSet,omitempty"`
	ReplicaSetUID string             `json:"replicaSetUID,omitempty"`
	ConfigMaps    []string           `json:"configMaps,omitempty"`
	Secrets       []string           `json:"secrets,omitempty"`
	Skipped       []SkipStatus       `json:"skipped,omitempty"`
	WaitingSince  *metav1.Time       `json:"waitingSince,omitempty"`
	WaitingFor    string             `json:"waitingFor,omitempty"`
	Discovered    []DiscoveredStatus `json:"discovered,omitempty"`
	// DryRun marks a dry run: ConfigMaps and Secrets are then what would be attached.
	DryRun bool `json:"dryRun,omitempty"`
}

// DiscoveredStatus records owner references that discovery added (or would add).
type DiscoveredStatus struct {
	Kind        plugin.Kind `json:"kind"`
	Name        string      `json:"name"`
	ReplicaSets []string    `json:"replicaSets"`
}

// SkipStatus records a listed object left alone because only other ReplicaSets use it.
type SkipStatus struct {
	Kind plugin.Kind `json:"kind"`
	Name string      `json:"name"`
	// Reason is rollback, older or credential.
	Reason string   `json:"reason,omitempty"`
	UsedBy []string `json:"usedBy"`
}

// Step is the step plugin: it implements argo-rollouts' step plugin RPC interface
// (rolloutsrpc.StepPlugin), which rpc.Serve serves to the Argo Rollouts controller. Every
// operation recovers its own panics (guard), so the process that every Rollout shares stays
// up. It holds no per-rollout state: one Step serves every Rollout of the controller
// concurrently.
type Step struct {
	Client plugin.ClientFunc
	Log    logrus.FieldLogger
	// Now is the clock (tests set it).
	Now func() time.Time
	// Concurrency bounds concurrent patches per call (default 8).
	Concurrency int
	// Backoff paces retries of transient errors within a call (default DefaultBackoff).
	Backoff wait.Backoff
	// CreationWait is how long a listed object that does not exist yet is waited for (default
	// plugin.DefaultCreationWait).
	CreationWait time.Duration
	// Events records Kubernetes Events on the Rollout (nil: none).
	Events plugin.EventRecorder
	// Policy is the administrator's (plugin args --require-opt-in, --opt-in-selector).
	Policy plugin.Policy
	// ControllerLeases are the controller mode's leader Leases (plugin args --controller-lease):
	// config that other workloads share is attached only where a live controller maintains it.
	ControllerLeases []plugin.LeaseRef

	// reads coalesces the namespace-wide reads of concurrent steps in one namespace.
	reads plugin.SharedReads
	// covered remembers, per namespace, whether the last step there found a live controller
	// covering it: only then does the next one read its objects' labels beside its first list.
	covered sync.Map
}

func (s *Step) covers(ns string) bool {
	v, _ := s.covered.Load(ns)
	b, _ := v.(bool)
	return b
}

func (s *Step) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *Step) log() logrus.FieldLogger {
	if s.Log == nil {
		return logrus.StandardLogger()
	}
	return s.Log
}

var _ rolloutsrpc.StepPlugin = (*Step)(nil)

// InitPlugin does nothing that can fail: the controller never calls it again after a failure
// and would keep sending Run to an uninitialised plugin. The client is built lazily in Run.
func (s *Step) InitPlugin() (rerr types.RpcError) {
	defer s.guard("InitPlugin", nil, &rerr)
	s.log().WithField("version", plugin.Version).Info("configmap-attacher step plugin initialised")
	return types.RpcError{}
}

// Type names the plugin; the controller never calls it for step plugins.
func (s *Step) Type() string { return "configmap-attacher" }

// Run attaches the listed objects to the ReplicaSet being rolled out.
func (s *Step) Run(ro *v1alpha1.Rollout, sc *types.RpcStepContext) (res types.RpcStepResult, rerr types.RpcError) {
	defer s.guard("Run", ro, &rerr)
	ctx, cancel := context.WithTimeout(context.Background(), RunDeadline)
	defer cancel()
	return s.run(ctx, ro, sc)
}

// guard turns a panic into an error result: the controller retries the step, and the
// process, shared by every Rollout, stays up.
func (s *Step) guard(op string, ro *v1alpha1.Rollout, rerr *types.RpcError) {
	r := recover()
	if r == nil {
		return
	}
	log := s.log().WithField("operation", op)
	if ro != nil {
		log = log.WithFields(logrus.Fields{"rollout": ro.Name, "namespace": ro.Namespace})
	}
	log.WithField("stack", string(debug.Stack())).Errorf("panic: %v", r)
	*rerr = types.RpcError{ErrorString: fmt.Sprintf("configmap-attacher: internal error in %s: %v (please report it)", op, r)}
}

func (s *Step) run(ctx context.Context, ro *v1alpha1.Rollout, sc *types.RpcStepContext) (types.RpcStepResult, types.RpcError) {
	if ro == nil || sc == nil {
		return failed("the controller sent no Rollout or no step context: nothing to do"), types.RpcError{}
	}
	wl := plugin.Workload{Kind: plugin.KindRollout, Namespace: ro.Namespace, Name: ro.Name, UID: ro.UID, Selector: ro.Spec.Selector}
	if wr := ro.Spec.WorkloadRef; wr != nil && wr.Kind == plugin.KindDeployment {
		wl.RefDeployment = wr.Name
	}
	log := s.log().WithFields(logrus.Fields{"rollout": ro.Name, "namespace": ro.Namespace, "step": sc.PluginName})

	cfg, err := plugin.ParseConfig(sc.Config)
	if err != nil {
		return s.verdict(log, ro, err)
	}
	var prev Status
	if len(sc.Status) > 0 {
		// A Status we cannot read is only a lost wait start; never fail on it.
		_ = json.Unmarshal(sc.Status, &prev)
	}

	clients, err := s.Client()
	if err != nil {
		return types.RpcStepResult{}, rpcErr(fmt.Errorf("building the Kubernetes client: %w", err))
	}
	a := &plugin.Attacher{Client: clients.Kube, Meta: clients.Meta, Log: log, Concurrency: s.Concurrency, Backoff: s.Backoff,
		CreationWait: s.CreationWait}

	// Only the Rollout's own ReplicaSets until its target exists: a waiting step reads nothing
	// else (read.go, readusage.go) from its second call on. Beside that list, unless the last
	// call waited: the controllers' Leases and, where the last step in this namespace found a
	// live controller, the listed objects' labels, which a step that goes on reads next.
	var pre *plugin.Prefetched
	var prefetched sync.WaitGroup
	if prev.WaitingSince == nil && len(s.ControllerLeases) > 0 {
		labels := !s.Policy.RequireOptIn && s.covers(ro.Namespace)
		prefetched.Go(func() { pre = a.Prefetch(ctx, ro.Namespace, s.ControllerLeases, cfg.Objects(), labels) })
	}
	rss, err := a.ReadOwnReplicaSets(ctx, wl)
	prefetched.Wait()
	if pre != nil {
		s.covered.Store(ro.Namespace, plugin.CoversNamespace(pre.Leases, plugin.KindRollout, ro.Namespace, s.now()))
	}
	if err != nil {
		return s.verdict(log, ro, err)
	}
	target := stepTarget(ro, rss)
	if target == nil {
		return s.wait(log, ro, wl, cfg, prev)
	}
	log = log.WithField("replicaset", target.Name)
	a.Log = log

	// Every user of an object counts (users.go); the namespace's users are read only for
	// objects no live controller maintains (Reconcile). The Rollout itself is known to the
	// controller that sent it.
	req := plugin.Request{Workload: wl, ReplicaSets: rss, Target: target, Objects: cfg.Objects(),
		AllowUnreferenced: cfg.AllowUnreferenced, Policy: s.Policy, DryRun: cfg.DryRun,
		Maintainers: &plugin.Maintainers{Leases: s.ControllerLeases, Now: s.Now}, Prefetched: pre,
		ReadUsers: func(ctx context.Context) (plugin.UserView, error) {
			return s.reads.Read(ctx, a, ro.Namespace, plugin.RefOf(plugin.KindRollout, ro))
		}}
	if cfg.Discover != nil {
		if req.Discover, err = cfg.Discover.LabelSelector(); err != nil {
			return s.verdict(log, ro, &plugin.FailError{Msg: "discover.selector: " + err.Error()})
		}
	}
	res, err := a.Reconcile(ctx, req)
	for _, w := range res.Warnings {
		log.Warn(w)
		s.event(ro, corev1.EventTypeWarning, plugin.ReasonDiscoverWarning, w)
	}
	if err != nil {
		return s.verdict(log, ro, err)
	}
	st := Status{ReplicaSet: target.Name, ReplicaSetUID: string(target.UID), DryRun: cfg.DryRun}
	for _, sk := range res.Skipped {
		st.Skipped = append(st.Skipped, SkipStatus{Kind: sk.Object.Kind, Name: sk.Object.Name, Reason: sk.Reason, UsedBy: sk.UsedBy})
	}
	var discovered int
	for _, w := range res.Added {
		if !w.Listed {
			st.Discovered = append(st.Discovered, DiscoveredStatus{Kind: w.Object.Kind, Name: w.Object.Name, ReplicaSets: w.Names()})
			discovered++
		}
	}
	if cfg.DryRun {
		var would []plugin.Object
		for _, w := range res.Added {
			if w.Listed {
				would = append(would, w.Object)
			}
		}
		st.setAttached(would)
	} else {
		st.setAttached(res.Listed)
	}
	log.Info(res.Message)
	if !cfg.DryRun && (len(res.Listed) > 0 || discovered > 0) {
		s.event(ro, corev1.EventTypeNormal, plugin.ReasonAttached, res.Message)
	}
	return types.RpcStepResult{Phase: types.PhaseSuccessful, Message: res.Message, Status: mustJSON(st)}, types.RpcError{}
}

// stepTarget is the step's target: the ReplicaSet labelled with status.currentPodHash, the
// controller's own record of its new ReplicaSet. The step cannot use FindNewReplicaSet on the
// Rollout it receives: net/rpc's gob drops zero values (automountServiceAccountToken: false,
// replicas: 0, …), so the template arrives changed and hashes differently from the ReplicaSet
// the controller created (rpc TestRolloutTemplateIsLossyOverRPC). The hash is current when a
// step runs: the controller resets the step index in the same status write that records the
// new hash, and runs steps from the persisted status.
func stepTarget(ro *v1alpha1.Rollout, rss []*appsv1.ReplicaSet) *appsv1.ReplicaSet {
	return plugin.ByPodHash(rss, ro.Status.CurrentPodHash)
}

func (st *Status) setAttached(objs []plugin.Object) {
	for _, o := range objs {
		if o.Kind == plugin.KindSecret {
			st.Secrets = append(st.Secrets, o.Name)
		} else {
			st.ConfigMaps = append(st.ConfigMaps, o.Name)
		}
	}
}

func (s *Step) event(ro *v1alpha1.Rollout, eventType, reason, msg string) {
	if s.Events != nil {
		s.Events.Event(ro, eventType, reason, msg)
	}
}

// wait returns Running while the ReplicaSet is missing, and Failed once the timeout passed
// since the first wait (recorded in the Status, since the plugin keeps no memory).
func (s *Step) wait(log logrus.FieldLogger, ro *v1alpha1.Rollout, ref plugin.Workload, cfg plugin.Config, prev Status) (types.RpcStepResult, types.RpcError) {
	what := fmt.Sprintf("ReplicaSet with label %s=%s owned by %s", plugin.PodTemplateHashLabel, ro.Status.CurrentPodHash, ref)
	if ro.Status.CurrentPodHash == "" {
		what = fmt.Sprintf("%s to report status.currentPodHash", ref)
	}
	since := s.now()
	if prev.WaitingSince != nil {
		since = prev.WaitingSince.Time
	}
	if waited := s.now().Sub(since); waited >= cfg.Timeout.Duration {
		msg := fmt.Sprintf("timed out after %s waiting for %s: check that the controller can create it (kubectl describe rollout %s -n %s), or raise timeout in the step config", waited.Round(time.Second), what, ref.Name, ref.Namespace)
		return s.verdict(log, ro, &plugin.FailError{Msg: msg})
	}
	st := Status{WaitingSince: &metav1.Time{Time: since}, WaitingFor: what}
	log.Info("waiting for " + what)
	return types.RpcStepResult{Phase: types.PhaseRunning, Message: "waiting for " + what, RequeueAfter: RequeueAfter, Status: mustJSON(st)}, types.RpcError{}
}

// verdict maps an error to the step's result: permanent problems fail the step (with the
// message), anything else is an error result that the controller retries.
func (s *Step) verdict(log logrus.FieldLogger, ro *v1alpha1.Rollout, err error) (types.RpcStepResult, types.RpcError) {
	if plugin.IsPermanent(err) {
		log.Warn("step failed: " + err.Error())
		s.event(ro, corev1.EventTypeWarning, plugin.ReasonAttachFailed, err.Error())
		return failed(err.Error()), types.RpcError{}
	}
	log.WithError(err).Warn("transient error; the controller will retry the step")
	return types.RpcStepResult{}, rpcErr(err)
}

// Abort keeps every owner reference: the ReplicaSet still uses those objects, and a retry of
// the aborted rollout reuses the same ReplicaSet.
func (s *Step) Abort(ro *v1alpha1.Rollout, sc *types.RpcStepContext) (res types.RpcStepResult, rerr types.RpcError) {
	defer s.guard("Abort", ro, &rerr)
	return types.RpcStepResult{Phase: types.PhaseSuccessful, Message: "nothing to undo: owner references stay, the ReplicaSet still uses its objects"}, types.RpcError{}
}

// Terminate has nothing to stop: Run never leaves work running between calls.
func (s *Step) Terminate(ro *v1alpha1.Rollout, sc *types.RpcStepContext) (res types.RpcStepResult, rerr types.RpcError) {
	defer s.guard("Terminate", ro, &rerr)
	return types.RpcStepResult{Phase: types.PhaseSuccessful, Message: "nothing to terminate"}, types.RpcError{}
}

func failed(msg string) types.RpcStepResult {
	return types.RpcStepResult{Phase: types.PhaseFailed, Message: msg}
}

func rpcErr(err error) types.RpcError { return types.RpcError{ErrorString: err.Error()} }

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only fixed struct types are marshalled
	}
	return b
}
