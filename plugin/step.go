package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	replicasetutil "github.com/argoproj/argo-rollouts/utils/replicaset"
	appsv1 "k8s.io/api/apps/v1"
)

// RequeueAfter is how soon a waiting step asks to be called again. The controller ignores
// values up to 10 s (and then waits 30 s), so it must be above that floor.
const RequeueAfter = 15 * time.Second

// RunDeadline bounds one Run call: the controller's worker waits for it, and ten Rollouts at
// this step would otherwise hold all ten default workers while the apiserver hangs.
const RunDeadline = 20 * time.Second

// StepStatus is the JSON object the step returns as its Status; the controller stores it in
// status.canary.stepPluginStatuses[].status and passes it back on the next call.
type StepStatus struct {
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
	Kind        Kind     `json:"kind"`
	Name        string   `json:"name"`
	ReplicaSets []string `json:"replicaSets"`
}

// SkipStatus records a listed object left alone because only other ReplicaSets use it.
type SkipStatus struct {
	Kind Kind   `json:"kind"`
	Name string `json:"name"`
	// Reason is rollback, older or credential.
	Reason string   `json:"reason,omitempty"`
	UsedBy []string `json:"usedBy"`
}

// Step implements the Run, Abort and Terminate operations of the step plugin. It holds no
// per-rollout state: one Step serves every Rollout of the controller concurrently.
type Step struct {
	Client ClientFunc
	Log    logrus.FieldLogger
	// Now is the clock (tests set it).
	Now func() time.Time
	// Concurrency bounds concurrent patches per call (default 8).
	Concurrency int
	// Backoff paces retries of transient errors within a call (default DefaultBackoff).
	Backoff wait.Backoff
	// Events records Kubernetes Events on the Rollout (nil: none).
	Events EventRecorder
	// Policy is the administrator's (plugin args --require-opt-in, --opt-in-selector).
	Policy Policy
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

// Run attaches the listed objects to the ReplicaSet being rolled out.
func (s *Step) Run(ro *v1alpha1.Rollout, sc *types.RpcStepContext) (types.RpcStepResult, types.RpcError) {
	ctx, cancel := context.WithTimeout(context.Background(), RunDeadline)
	defer cancel()
	return s.run(ctx, ro, sc)
}

func (s *Step) run(ctx context.Context, ro *v1alpha1.Rollout, sc *types.RpcStepContext) (types.RpcStepResult, types.RpcError) {
	if ro == nil || sc == nil {
		return failed("the controller sent no Rollout or no step context: nothing to do"), types.RpcError{}
	}
	wl := Workload{Kind: KindRollout, Namespace: ro.Namespace, Name: ro.Name, UID: ro.UID, Selector: ro.Spec.Selector}
	log := s.log().WithFields(logrus.Fields{"rollout": ro.Name, "namespace": ro.Namespace, "step": sc.PluginName})

	cfg, err := ParseConfig(sc.Config)
	if err != nil {
		return s.verdict(log, ro, err)
	}
	var prev StepStatus
	if len(sc.Status) > 0 {
		// A Status we cannot read is only a lost wait start; never fail on it.
		_ = json.Unmarshal(sc.Status, &prev)
	}

	clients, err := s.Client()
	if err != nil {
		return types.RpcStepResult{}, rpcErr(fmt.Errorf("building the Kubernetes client: %w", err))
	}
	a := &Attacher{Client: clients.Kube, Meta: clients.Meta, Log: log, Concurrency: s.Concurrency, Backoff: s.Backoff}

	// Every user of an object in the namespace counts (users.go): the Rollout itself is known
	// to the controller that sent it.
	usage, err := a.ReadUsage(ctx, ro.Namespace, RefOf(KindRollout, ro))
	if err != nil {
		return s.verdict(log, ro, err)
	}
	rss, err := usage.Own(wl)
	if err != nil {
		return s.verdict(log, ro, err)
	}
	target := stepTarget(ro, rss)
	if target == nil {
		return s.wait(log, ro, wl, cfg, prev)
	}
	log = log.WithField("replicaset", target.Name)
	a.Log = log

	req := Request{Workload: wl, Users: usage, ReplicaSets: rss, Target: target, Objects: cfg.Objects(),
		AllowUnreferenced: cfg.AllowUnreferenced, Policy: s.Policy, DryRun: cfg.DryRun}
	if cfg.Discover != nil {
		if req.Discover, err = cfg.Discover.LabelSelector(); err != nil {
			return s.verdict(log, ro, &FailError{"discover.selector: " + err.Error()})
		}
	}
	res, err := a.Reconcile(ctx, req)
	for _, w := range res.Warnings {
		log.Warn(w)
		s.event(ro, corev1.EventTypeWarning, ReasonDiscoverWarning, w)
	}
	if err != nil {
		return s.verdict(log, ro, err)
	}
	st := StepStatus{ReplicaSet: target.Name, ReplicaSetUID: string(target.UID), DryRun: cfg.DryRun}
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
		var would []Object
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
		s.event(ro, corev1.EventTypeNormal, ReasonAttached, res.Message)
	}
	return types.RpcStepResult{Phase: types.PhaseSuccessful, Message: res.Message, Status: mustJSON(st)}, types.RpcError{}
}

// NewReplicaSet is the ReplicaSet the Rollouts controller itself calls new for the Rollout as
// read from the API (the command line, audit): argo-rollouts' FindNewReplicaSet (the template
// hash with status.collisionCount, then the old hash, then template equality, which is what
// finds a re-used ReplicaSet after undo). A Rollout without a template (an unresolved
// workloadRef) falls back to the ReplicaSet that status.currentPodHash names.
func NewReplicaSet(ro *v1alpha1.Rollout, rss []*appsv1.ReplicaSet) *appsv1.ReplicaSet {
	if len(ro.Spec.Template.Spec.Containers) == 0 {
		return ByPodHash(rss, ro.Status.CurrentPodHash)
	}
	return replicasetutil.FindNewReplicaSet(ro, rss)
}

// stepTarget is the step's target: the ReplicaSet labelled with status.currentPodHash, the
// controller's own record of its new ReplicaSet. The step cannot use FindNewReplicaSet on the
// Rollout it receives: net/rpc's gob drops zero values (automountServiceAccountToken: false,
// replicas: 0, …), so the template arrives changed and hashes differently from the ReplicaSet
// the controller created (rpc TestRolloutTemplateIsLossyOverRPC). The hash is current when a
// step runs: the controller resets the step index in the same status write that records the
// new hash, and runs steps from the persisted status.
func stepTarget(ro *v1alpha1.Rollout, rss []*appsv1.ReplicaSet) *appsv1.ReplicaSet {
	return ByPodHash(rss, ro.Status.CurrentPodHash)
}

func (st *StepStatus) setAttached(objs []Object) {
	for _, o := range objs {
		if o.Kind == KindSecret {
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
func (s *Step) wait(log logrus.FieldLogger, ro *v1alpha1.Rollout, ref Workload, cfg Config, prev StepStatus) (types.RpcStepResult, types.RpcError) {
	what := fmt.Sprintf("ReplicaSet with label %s=%s owned by %s", PodTemplateHashLabel, ro.Status.CurrentPodHash, ref)
	if ro.Status.CurrentPodHash == "" {
		what = fmt.Sprintf("%s to report status.currentPodHash", ref)
	}
	since := s.now()
	if prev.WaitingSince != nil {
		since = prev.WaitingSince.Time
	}
	if waited := s.now().Sub(since); waited >= cfg.Timeout.Duration {
		msg := fmt.Sprintf("timed out after %s waiting for %s: check that the controller can create it (kubectl describe rollout %s -n %s), or raise timeout in the step config", waited.Round(time.Second), what, ref.Name, ref.Namespace)
		return s.verdict(log, ro, &FailError{msg})
	}
	st := StepStatus{WaitingSince: &metav1.Time{Time: since}, WaitingFor: what}
	log.Info("waiting for " + what)
	return types.RpcStepResult{Phase: types.PhaseRunning, Message: "waiting for " + what, RequeueAfter: RequeueAfter, Status: mustJSON(st)}, types.RpcError{}
}

// verdict maps an error to the step's result: permanent problems fail the step (with the
// message), anything else is an error result that the controller retries.
func (s *Step) verdict(log logrus.FieldLogger, ro *v1alpha1.Rollout, err error) (types.RpcStepResult, types.RpcError) {
	if IsPermanent(err) {
		log.Warn("step failed: " + err.Error())
		s.event(ro, corev1.EventTypeWarning, ReasonAttachFailed, err.Error())
		return failed(err.Error()), types.RpcError{}
	}
	log.WithError(err).Warn("transient error; the controller will retry the step")
	return types.RpcStepResult{}, rpcErr(err)
}

// Abort keeps every owner reference: the ReplicaSet still uses those objects, and a retry of
// the aborted rollout reuses the same ReplicaSet.
func (s *Step) Abort(ro *v1alpha1.Rollout, sc *types.RpcStepContext) (types.RpcStepResult, types.RpcError) {
	return types.RpcStepResult{Phase: types.PhaseSuccessful, Message: "nothing to undo: owner references stay, the ReplicaSet still uses its objects"}, types.RpcError{}
}

// Terminate has nothing to stop: Run never leaves work running between calls.
func (s *Step) Terminate(ro *v1alpha1.Rollout, sc *types.RpcStepContext) (types.RpcStepResult, types.RpcError) {
	return types.RpcStepResult{Phase: types.PhaseSuccessful, Message: "nothing to terminate"}, types.RpcError{}
}

// successMessage says what was attached and what was skipped, e.g.
// "attached 2 ConfigMaps and 1 Secret to ReplicaSet web-7f9c2d".
func successMessage(rs string, attached []Object, skipped []Skip) string {
	var cms, secs int
	for _, o := range attached {
		if o.Kind == KindSecret {
			secs++
		} else {
			cms++
		}
	}
	var counts []string
	if cms > 0 {
		counts = append(counts, plural(cms, "ConfigMap"))
	}
	if secs > 0 {
		counts = append(counts, plural(secs, "Secret"))
	}
	msg := "attached nothing to ReplicaSet " + rs
	if len(counts) > 0 {
		msg = fmt.Sprintf("attached %s to ReplicaSet %s", strings.Join(counts, " and "), rs)
	}
	for _, sk := range skipped {
		msg += "; " + skipMessage(sk, rs)
	}
	return msg
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
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
