package controller

import (
	"context"
	"maps"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"

	"github.com/configmap-attacher/configmap-attacher/plugin"
)

// The leader Lease says who maintains what: every write of it by this process (the create or
// update that acquires it, each renewal) carries the label plugin.ControllerLeaseLabel and the
// scope annotations (watched namespaces, opt-in selector, workload kinds). The step and the Job
// read it (plugin.MaintainedBy): a live holder whose scope covers an object maintains the
// owners of its users, so they may attach config that other workloads share. Only the holder
// writes the Lease, so its marks are always the leader's; a released or expired Lease is no
// controller, whatever its marks.

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
