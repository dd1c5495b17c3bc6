package controller

// The controller's configuration: what the command's flags set (Config, LeaderElection) and
// its defaults.

import (
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/record"
)

// RBACHint is the example RBAC of the controller, named in forbidden errors.
const RBACHint = "examples/controller.yaml"

// Defaults.
const (
	DefaultWorkers       = 4
	DefaultResync        = 10 * time.Minute
	DefaultGaugeInterval = 10 * time.Second
)

// LeaderElection configures the Lease the replicas compete for.
type LeaderElection struct {
	Namespace, ID, Identity                   string
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// Config configures a Controller.
type Config struct {
	// Kube reads ReplicaSets and writes Events; Meta watches and patches ConfigMaps and
	// Secrets as metadata only.
	Kube kubernetes.Interface
	Meta metadata.Interface
	// Dynamic, when set, reads Rollouts whole (compacted at once to their template's
	// references), so a Rollout's current template has an anchor as a Deployment's does. Nil:
	// Rollouts are watched as metadata only, and their delete and re-apply is not covered.
	Dynamic dynamic.Interface
	// LeaderKube, when set, is the client for the Lease (a separate client, so lease renewals
	// never queue behind patches in the client-side rate limiter). Default Kube.
	LeaderKube kubernetes.Interface
	// Namespaces to watch; empty means all.
	Namespaces []string
	// Selector of opted-in objects; it must select something less than everything.
	Selector labels.Selector
	// Rollouts and Deployments choose the workload kinds whose ReplicaSets the controller acts
	// for. Every user of an object counts all the same: a ReplicaSet of any kind becomes an
	// owner too.
	Rollouts, Deployments bool
	// Adopting are the other user kinds whose use adopts an object: "StatefulSet",
	// "DaemonSet", "Job", "CronJob", "Pod" (a Pod no controller owns); nil: every one of them.
	// Adopted, every user of the object owns it, whatever its kind.
	Adopting map[string]bool
	// RolloutsServed and ExperimentsServed: argoproj.io serves Rollouts (Experiments), so
	// their existence is watched. Without it a ReplicaSet controlled by one is of unknown
	// liveness and blocks.
	RolloutsServed, ExperimentsServed bool
	Workers                           int
	// Resync is the interval of the full reconcile (0: only at start).
	Resync time.Duration
	// GaugeInterval is how often the unowned and lost gauges are recomputed from the caches.
	GaugeInterval time.Duration
	DryRun        bool
	Log           logrus.FieldLogger
	Metrics       *Metrics
	// LeaderElection nil: this process leads from the start (a single replica).
	LeaderElection *LeaderElection
	// Events records Warning events on workloads (default: a broadcaster writing to Kube).
	Events record.EventRecorder
	// FreeMemoryAfterSync returns the initial sync's garbage to the OS (a process of its own).
	FreeMemoryAfterSync bool
	// AnchorGrace is how long the anchor of a deleted workload is kept (default
	// DefaultAnchorGrace): the delete and re-apply window.
	AnchorGrace time.Duration
}
