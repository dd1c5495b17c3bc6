package plugin

import (
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/metadata"
)

// The Attacher: the clients, limits and defaults every layer's requests use.

// RBACHint is where the docs keep the RBAC the plugin needs.
const RBACHint = "examples/rbac-step-plugin.yaml"

// Attacher adds owner references from ConfigMaps and Secrets to ReplicaSets. It keeps no
// per-workload state, so one Attacher serves every Rollout concurrently.
type Attacher struct {
	// Client lists ReplicaSets and the other users, and creates Events.
	Client Kube
	// Meta reads and patches ConfigMaps and Secrets as metadata only (PartialObjectMetadata):
	// their data never enters the process.
	Meta metadata.Interface
	Log  logrus.FieldLogger
	// Concurrency bounds the patches in flight for one call (default 8).
	Concurrency int
	// RequestTimeout is the deadline of each API request (default 5s).
	RequestTimeout time.Duration
	// Backoff paces retries of transient API errors inside one call (default DefaultBackoff: 4
	// tries, 1.4 s of sleeps between them, 1.68 s at most with jitter).
	Backoff wait.Backoff
	// RBACHint names the example RBAC that fixes a 403 for this mode's identity
	// (default RBACHint, the step plugin's).
	RBACHint string
	// CreationWait is how long a listed object that does not exist yet is waited for (default
	// DefaultCreationWait): a sync may create it a moment after the workload. (Not the
	// controller's anchor grace: that keeps an anchor after its workload is deleted.)
	CreationWait time.Duration

	// noGet holds the resources whose GET the RBAC refused (readByName lists them instead).
	noGet sync.Map
}

// DefaultBackoff retries briefly: a longer outage is handed back to the caller (the Rollouts
// controller retries the step itself every 30 s).
var DefaultBackoff = wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 4}

// DefaultRequestTimeout is the deadline of one API request.
const DefaultRequestTimeout = 5 * time.Second

// DefaultCreationWait is how long a listed object that does not exist yet is waited for.
const DefaultCreationWait = 5 * time.Second

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

func (a *Attacher) creationWait() time.Duration {
	if a.CreationWait <= 0 {
		return DefaultCreationWait
	}
	return a.CreationWait
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
