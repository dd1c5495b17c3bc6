package plugin

import (
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
)

// PodTemplateHashLabel is the label Argo Rollouts puts on each ReplicaSet (and its pods)
// with the hash that status.currentPodHash and status.stableRS name.
const PodTemplateHashLabel = "rollouts-pod-template-hash"

// RBACHint is where the docs keep the RBAC the plugin needs.
const RBACHint = "examples/rbac-step-plugin.yaml"

// Attacher adds owner references from ConfigMaps and Secrets to ReplicaSets. It keeps no
// per-workload state, so one Attacher serves every Rollout concurrently.
type Attacher struct {
	// Client lists ReplicaSets.
	Client kubernetes.Interface
	// Meta reads and patches ConfigMaps and Secrets as metadata only (PartialObjectMetadata):
	// their data never enters the process.
	Meta metadata.Interface
	Log  logrus.FieldLogger
	// Concurrency bounds the patches in flight for one call (default 8).
	Concurrency int
	// RequestTimeout is the deadline of each API request (default 5s).
	RequestTimeout time.Duration
	// Backoff paces retries of transient API errors inside one call (default: 4 tries over ~3s).
	Backoff wait.Backoff
	// RBACHint names the example RBAC that fixes a 403 for this mode's identity
	// (default RBACHint, the step plugin's).
	RBACHint string
}

// DefaultBackoff retries briefly: a longer outage is handed back to the caller (the Rollouts
// controller retries the step itself every 30 s).
var DefaultBackoff = wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 4}

// DefaultRequestTimeout is the deadline of one API request.
const DefaultRequestTimeout = 5 * time.Second

func (a *Attacher) concurrency() int {
	if a.Concurrency <= 0 {
		return 8
	}
	return a.Concurrency
}

func (a *Attacher) log() logrus.FieldLogger {
	if a.Log == nil {
		return logrus.StandardLogger()
	}
	return a.Log
}

func (a *Attacher) requestTimeout() time.Duration {
	if a.RequestTimeout <= 0 {
		return DefaultRequestTimeout
	}
	return a.RequestTimeout
}

func (a *Attacher) rbacHint() string {
	if a.RBACHint == "" {
		return RBACHint
	}
	return a.RBACHint
}

func (a *Attacher) backoff() wait.Backoff {
	if a.Backoff.Steps == 0 {
		return DefaultBackoff
	}
	return a.Backoff
}

// controlled returns the ReplicaSets whose controller reference carries uid, oldest first.
func controlled(items []appsv1.ReplicaSet, uid types.UID) []*appsv1.ReplicaSet {
	var out []*appsv1.ReplicaSet
	for i := range items {
		if ref := metav1.GetControllerOf(&items[i]); ref != nil && ref.UID == uid {
			out = append(out, &items[i])
		}
	}
	SortReplicaSets(out)
	return out
}

// ByPodHash returns the ReplicaSet labelled with the Rollouts controller's pod-template hash
// (status.currentPodHash), or nil.
func ByPodHash(rss []*appsv1.ReplicaSet, hash string) *appsv1.ReplicaSet {
	if hash == "" {
		return nil
	}
	for _, rs := range rss {
		if rs.Labels[PodTemplateHashLabel] == hash {
			return rs
		}
	}
	return nil
}

func apiMessage(err error) string {
	var s apierrors.APIStatus
	if errors.As(err, &s) {
		return s.Status().Message
	}
	return err.Error()
}

func resourcesOf(objs []Object) string {
	var cm, sec bool
	for _, o := range objs {
		cm = cm || o.Kind == KindConfigMap
		sec = sec || o.Kind == KindSecret
	}
	switch {
	case cm && sec:
		return "configmaps and secrets"
	case sec:
		return "secrets"
	default:
		return "configmaps"
	}
}

func sortObjects(objs []Object) { slices.SortFunc(objs, CompareObjects) }

func isNotFound(err error) bool  { return apierrors.IsNotFound(err) }
func isForbidden(err error) bool { return apierrors.IsForbidden(err) }

func joinObjects(objs []Object) string {
	s := make([]string, len(objs))
	for i, o := range objs {
		s[i] = o.String()
	}
	return strings.Join(s, ", ")
}

func pronoun(n int) string {
	if n == 1 {
		return "it"
	}
	return "them"
}
