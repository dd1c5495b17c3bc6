package bench

import (
	"context"
	"testing"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/configmap-attacher/configmap-attacher/plugin"
)

// formulaPageSize is the page size of every namespace-wide list of the formula: the plugin's,
// so that both send the same requests.
const formulaPageSize = plugin.PageSize

// formulaClients are the clients the formula's reads go through: typed lists in protobuf, the
// rest metadata-only.
type formulaClients struct {
	kube kubernetes.Interface // protobuf
	meta metadata.Interface
}

// protoConfig is cfg asking for protobuf (JSON for what has no protobuf encoding).
func protoConfig(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.ContentType = "application/vnd.kubernetes.protobuf"
	c.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	return c
}

func newFormulaClients(b testing.TB, cfg *rest.Config) formulaClients {
	b.Helper()
	return formulaClients{kube: clientset(b, protoConfig(cfg)), meta: metaClient(b, cfg)}
}

// floorFormula sends the reads of the step's formula (what a step needs to know, and
// no more) straight through client-go, as the step would send them, without decoding beyond
// client-go's or planning:
//
//   - always: its own Rollout's ReplicaSets (a list by the Rollout's selector), each listed
//     object's metadata (a GET each, metadata client, 8 at a time) and the controller Lease (a
//     GET), concurrently;
//   - only when some object is not maintained by a live controller (maintained=false: a
//     step-only install), then, concurrently, every ReplicaSet (then the metadata of each
//     controller kind of the ReplicaSets not the step's own, one list per kind), every
//     StatefulSet, DaemonSet, Job, CronJob and apps/v1 ControllerRevision, and the Pods'
//     metadata, every list in pages of formulaPageSize, typed ones in protobuf; then the specs
//     of the Pods whose controller is none of ReplicaSet, Job, StatefulSet or DaemonSet (bare
//     Pods, unknown controller kinds): a paged list per group of them with the same label
//     keys, by name the others (floorPodSpecs).
//
// The patches and the Event follow (the caller's). Waiting for its target, the step would send
// only the first list.
func floorFormula(ctx context.Context, c formulaClients, set *objectSet, lease plugin.LeaseRef, maintained bool) error {
	ns := set.ro.Namespace
	sel, err := metav1.LabelSelectorAsSelector(set.ro.Spec.Selector)
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		_, err := c.kube.AppsV1().ReplicaSets(ns).List(gctx, metav1.ListOptions{LabelSelector: sel.String()})
		return err
	})
	g.Go(func() error {
		_, err := c.kube.CoordinationV1().Leases(lease.Namespace).Get(gctx, lease.Name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		return nil
	})
	g.Go(func() error {
		return floorSend(gctx, set.objects(), func(ctx context.Context, o objRef) error {
			res := plugin.KindConfigMap.Resource()
			if o.secret {
				res = plugin.KindSecret.Resource()
			}
			_, err := c.meta.Resource(res).Namespace(ns).Get(ctx, o.name, metav1.GetOptions{})
			return err
		})
	})
	if err := g.Wait(); err != nil || maintained {
		return err
	}
	return floorNamespaceReads(ctx, c, ns, set.ro.UID)
}

// floorNamespaceReads is the step-only part of floorFormula.
func floorNamespaceReads(ctx context.Context, c formulaClients, ns string, own ktypes.UID) error {
	g, ctx := errgroup.WithContext(ctx)
	apps, batch := c.kube.AppsV1(), c.kube.BatchV1()
	g.Go(func() error {
		need := map[string]bool{}
		err := paged(ctx, func(ctx context.Context, o metav1.ListOptions) (string, error) {
			l, err := apps.ReplicaSets(ns).List(ctx, o)
			if err != nil {
				return "", err
			}
			for i := range l.Items {
				if ref := metav1.GetControllerOfNoCopy(&l.Items[i]); ref != nil && ref.UID != own {
					if gv, err := schema.ParseGroupVersion(ref.APIVersion); err == nil {
						need[gv.Group+"/"+ref.Kind] = true
					}
				}
			}
			return l.Continue, nil
		})
		if err != nil {
			return err
		}
		for _, k := range usersControllers {
			if need[k.group+"/"+k.kind] {
				if err := pagedMeta(ctx, c.meta, k.gvr, ns, nil); err != nil {
					return err
				}
			}
		}
		return nil
	})
	g.Go(func() error {
		return paged(ctx, func(ctx context.Context, o metav1.ListOptions) (string, error) {
			l, err := apps.StatefulSets(ns).List(ctx, o)
			return continueOf(l, err)
		})
	})
	g.Go(func() error {
		return paged(ctx, func(ctx context.Context, o metav1.ListOptions) (string, error) {
			l, err := apps.DaemonSets(ns).List(ctx, o)
			return continueOf(l, err)
		})
	})
	g.Go(func() error {
		return paged(ctx, func(ctx context.Context, o metav1.ListOptions) (string, error) {
			l, err := batch.Jobs(ns).List(ctx, o)
			return continueOf(l, err)
		})
	})
	g.Go(func() error {
		return paged(ctx, func(ctx context.Context, o metav1.ListOptions) (string, error) {
			l, err := batch.CronJobs(ns).List(ctx, o)
			return continueOf(l, err)
		})
	})
	g.Go(func() error {
		return paged(ctx, func(ctx context.Context, o metav1.ListOptions) (string, error) {
			l, err := apps.ControllerRevisions(ns).List(ctx, o)
			return continueOf(l, err)
		})
	})
	g.Go(func() error { return floorPodSpecs(ctx, c, ns) })
	return g.Wait()
}

// floorPodSpecs reads the Pods' metadata, then the specs of the Pods no known controller
// stands for with the requests the formula names for them (plugin.PodCensus.SpecReads: one
// paged list per group of them with the same label keys, by name the others; every Pod in one
// paged list when more than 64 are by name), 8 at a time.
func floorPodSpecs(ctx context.Context, c formulaClients, ns string) error {
	var census plugin.PodCensus
	pods := corev1.SchemeGroupVersion.WithResource("pods")
	if err := pagedMeta(ctx, c.meta, pods, ns, func(m *metav1.PartialObjectMetadata) { census.Add(m) }); err != nil {
		return err
	}
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, o := range census.SpecReads(true) {
		g.Go(func() error {
			if o.Limit == 0 {
				_, err := c.kube.CoreV1().Pods(ns).List(ctx, o)
				return err
			}
			return paged(ctx, func(ctx context.Context, p metav1.ListOptions) (string, error) {
				p.LabelSelector = o.LabelSelector
				return continueOf(c.kube.CoreV1().Pods(ns).List(ctx, p))
			})
		})
	}
	return g.Wait()
}

// continueOf is a typed list's continue token.
func continueOf(l interface{ GetContinue() string }, err error) (string, error) {
	if err != nil {
		return "", err
	}
	return l.GetContinue(), nil
}

// paged runs list page by page (formulaPageSize) until the last.
func paged(ctx context.Context, list func(context.Context, metav1.ListOptions) (string, error)) error {
	opts := metav1.ListOptions{Limit: formulaPageSize}
	for {
		next, err := list(ctx, opts)
		if err != nil || next == "" {
			return err
		}
		opts.Continue = next
	}
}

// pagedMeta lists gvr's metadata in ns page by page, calling each (if set) for every item.
func pagedMeta(ctx context.Context, m metadata.Interface, gvr schema.GroupVersionResource, ns string, each func(*metav1.PartialObjectMetadata)) error {
	return paged(ctx, func(ctx context.Context, o metav1.ListOptions) (string, error) {
		l, err := m.Resource(gvr).Namespace(ns).List(ctx, o)
		if err != nil {
			return "", err
		}
		if each != nil {
			for i := range l.Items {
				each(&l.Items[i])
			}
		}
		return l.Continue, nil
	})
}
