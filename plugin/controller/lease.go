package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/sirupsen/logrus"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/configmap-attacher/configmap-attacher/plugin"
)

// Leader election on a Lease, and the marks the Lease carries. Only the leader writes: a
// standby keeps its caches warm and its queue empty until it wins the Lease.
//
// The leader Lease says who maintains what: every write of it by this process (the create or
// update that acquires it, each renewal) carries the label plugin.ControllerLeaseLabel and the
// scope annotations (watched namespaces, opt-in selector, workload kinds). The step and the Job
// read it (plugin.MaintainedBy): a live holder whose scope covers an object maintains the
// owners of its users, so they may attach config that other workloads share. Only the holder
// writes the Lease, so its marks are always the leader's; a released or expired Lease is no
// controller, whatever its marks.

// Leading reports whether this process is the one that writes.
func (c *Controller) Leading() bool { return c.leading.Load() }

// Healthz checks that a leader still renews its lease (nil without leader election).
func (c *Controller) Healthz() error {
	if c.healthz == nil {
		return nil
	}
	return c.healthz.Check(nil)
}

// leadWhenElected stands by until this process wins the Lease, then leads until ctx is done or
// the lease is lost. Losing it returns an error: the process must exit, so that a replica that
// may have been partitioned never writes on stale caches.
func (c *Controller) leadWhenElected(ctx context.Context) error {
	le := c.cfg.LeaderElection
	lost := make(chan struct{})
	// The elector has its own context: on shutdown the workers stop first (in-flight patches
	// finish), then the lease is released, so no write happens after the handover.
	electorCtx, cancelElector := context.WithCancel(context.Background())
	defer cancelElector()
	leadDone := make(chan struct{})
	lead := func(leCtx context.Context) {
		defer close(leadDone)
		wctx, cancel := context.WithCancel(leCtx)
		defer cancel()
		defer context.AfterFunc(ctx, cancel)()
		c.lead(wctx)
	}
	go func() {
		<-ctx.Done()
		if c.leading.Load() {
			select {
			case <-leadDone:
			case <-time.After(10 * time.Second):
			}
		}
		cancelElector()
	}()
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: le.Namespace, Name: le.ID},
			Client:     c.markedLeases(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: le.Identity},
		},
		LeaseDuration:   le.LeaseDuration,
		RenewDeadline:   le.RenewDeadline,
		RetryPeriod:     le.RetryPeriod,
		ReleaseOnCancel: true, // a clean shutdown hands over at once, not after a lease duration
		WatchDog:        c.healthz,
		Name:            le.ID,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: lead,
			OnStoppedLeading: func() { close(lost) },
			OnNewLeader: func(id string) {
				c.log.WithFields(logrus.Fields{"leader": id, "self": id == le.Identity}).Info("leader elected")
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	c.log.WithFields(logrus.Fields{"lease": le.Namespace + "/" + le.ID, "identity": le.Identity}).Info("caches synced; waiting for the lease (standby: no writes)")
	elector.Run(electorCtx)
	<-lost
	if ctx.Err() != nil {
		return nil
	}
	return errors.New("lost the leader lease")
}

// scopeMarks are the label and annotations this controller writes on its Lease.
func (c *Controller) scopeMarks() (map[string]string, map[string]string) {
	var workloads []string
	if c.cfg.Rollouts {
		workloads = append(workloads, plugin.WorkloadsName(plugin.KindRollout))
	}
	if c.cfg.Deployments {
		workloads = append(workloads, plugin.WorkloadsName(plugin.KindDeployment))
	}
	return map[string]string{plugin.ControllerLeaseLabel: "true"}, plugin.ScopeAnnotations(c.cfg.Namespaces, c.cfg.Selector, workloads)
}

func (c *Controller) markedLeases() coordinationv1client.LeasesGetter {
	labels, annotations := c.scopeMarks()
	return markedLeases{LeasesGetter: c.cfg.LeaderKube.CoordinationV1(), labels: labels, annotations: annotations}
}

// markedLeases is the LeasesGetter of the leader election's LeaseLock: its creates and updates
// carry the marks (the LeaseLock copies the object it last read, so they persist between
// writes; other labels and annotations are kept).
type markedLeases struct {
	coordinationv1client.LeasesGetter
	labels, annotations map[string]string
}

func (m markedLeases) Leases(ns string) coordinationv1client.LeaseInterface {
	return markedLease{LeaseInterface: m.LeasesGetter.Leases(ns), m: m}
}

type markedLease struct {
	coordinationv1client.LeaseInterface
	m markedLeases
}

func (l markedLease) mark(lease *coordinationv1.Lease) *coordinationv1.Lease {
	out := lease.DeepCopy()
	if out.Labels == nil {
		out.Labels = map[string]string{}
	}
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	maps.Copy(out.Labels, l.m.labels)
	maps.Copy(out.Annotations, l.m.annotations)
	return out
}

func (l markedLease) Create(ctx context.Context, lease *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error) {
	return l.LeaseInterface.Create(ctx, l.mark(lease), opts)
}

func (l markedLease) Update(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	return l.LeaseInterface.Update(ctx, l.mark(lease), opts)
}
