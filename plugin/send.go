package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
)

// The senders: call, the one deadline-and-retry wrapper every request goes through, pages
// (every paged list), and patch, which sends the add-only owner patch exactly as it is given.

// call runs one API request with a per-request deadline and retries of transient errors: the
// one retry helper of the package. A retry waits out the backoff (DefaultBackoff: 4 tries, the
// three sleeps between them 0.2 + 0.4 + 0.8 = 1.4 s, up to 1.68 s with jitter), but never past
// ctx: a caller whose time is up gets the last error at once, not after the sleep.
func (a *Attacher) call(ctx context.Context, f func(context.Context) error) error {
	b := a.backoff()
	for {
		err := a.try(ctx, f)
		// As retry.OnError: Steps tries in all, the last error once they are spent.
		if err == nil || ctx.Err() != nil || !isTransient(err) || b.Steps <= 1 {
			return err
		}
		sleep := time.NewTimer(b.Step())
		select {
		case <-ctx.Done():
			sleep.Stop()
			return err
		case <-sleep.C:
		}
	}
}

// try is one try of call: one request under its own deadline.
func (a *Attacher) try(ctx context.Context, f func(context.Context) error) error {
	rctx, cancel := context.WithTimeout(ctx, a.requestTimeout())
	defer cancel()
	return f(rctx)
}

// Call runs one API request with the Attacher's per-request deadline (RequestTimeout) and
// retries of transient errors (Backoff), stopping when ctx is done: the package's one retry
// helper, call, for callers outside the package (audit's reads).
func (a *Attacher) Call(ctx context.Context, f func(context.Context) error) error {
	return a.call(ctx, f)
}

// pages runs one paged list: page sends one request with opts (limit PageSize, continue set),
// through call (the request's deadline and retries), processes its items and returns the next
// continue token. A continue token that expired (410: the list outlived etcd's compaction of
// its revision) restarts the list once from the start, after reset: the pages already seen are
// of a revision the rest can no longer be read at. Reads are consistent (no resourceVersion):
// a cached read could miss a user created a moment ago.
func (a *Attacher) pages(ctx context.Context, opts metav1.ListOptions, reset func(),
	page func(context.Context, metav1.ListOptions) (string, error)) error {
	opts.Limit = PageSize
	restarted := false
	for {
		var next string
		err := a.call(ctx, func(ctx context.Context) error {
			var err error
			next, err = page(ctx, opts)
			return err
		})
		switch {
		case err == nil:
		case opts.Continue != "" && !restarted && (apierrors.IsResourceExpired(err) || apierrors.IsGone(err)):
			restarted = true
			reset()
			opts.Continue = ""
			continue
		default:
			return err
		}
		if next == "" {
			return nil
		}
		opts.Continue = next
	}
}

// patch is the write of every mode: one add-only patch that makes each of owners an owner of
// o (uid, when set, is o's UID as a precondition). It sends exactly what it is given: which
// owners is decideOwners' decision. An empty list is refused rather than sent (an empty
// ownerReferences list in a patch is no addition).
func (a *Attacher) patch(ctx context.Context, ns string, o Object, uid types.UID, owners []Owner) error {
	if len(owners) == 0 {
		return fmt.Errorf("internal error: a patch of %s with no owner to add", o)
	}
	body := ownerPatchFor(uid, owners)
	return a.call(ctx, func(ctx context.Context) error {
		_, err := a.Meta.Resource(o.Kind.Resource()).Namespace(ns).Patch(ctx, o.Name, types.StrategicMergePatchType, body, metav1.PatchOptions{})
		if err != nil && isTransient(err) {
			a.log().WithField("object", o.String()).WithError(err).Debug("transient error, retrying")
		}
		return err
	})
}

// OwnerPatch is the strategic merge patch that adds the ReplicaSets as owners. ObjectMeta
// declares ownerReferences with patchMergeKey uid, so the apiserver merges these entries into
// the list by UID: no read, no read-modify-write race with the garbage collector (which edits
// the same list), other owners untouched, and a repeat is a no-op that leaves the
// resourceVersion as it was. The entry carries only the identifying fields: `controller` is
// left out (false is its default), so an entry already there with the same UID — the original
// tool's `controller: true` — keeps every field it has.
func OwnerPatch(rss ...*appsv1.ReplicaSet) []byte {
	owners := make([]Owner, len(rss))
	for i, rs := range rss {
		owners[i] = OwnerOf(rs)
	}
	return ownerPatchFor("", owners)
}

// ownerPatchFor is OwnerPatch with the object's UID as a precondition when uid is set: the
// apiserver refuses the patch (422, metadata.uid is immutable) if the name now belongs to
// another object (deleted and recreated since it was read), as the garbage collector's own
// patches do.
func ownerPatchFor(uid types.UID, rss []Owner) []byte {
	type ref struct {
		APIVersion string    `json:"apiVersion"`
		Kind       string    `json:"kind"`
		Name       string    `json:"name"`
		UID        types.UID `json:"uid"`
	}
	refs := make([]ref, 0, len(rss))
	for _, o := range rss {
		refs = append(refs, ref{o.APIVersion(), o.KindOf(), o.Name, o.UID})
	}
	meta := map[string]any{"ownerReferences": refs}
	if uid != "" {
		meta["uid"] = uid
	}
	b, _ := json.Marshal(map[string]any{"metadata": meta}) // cannot fail: fixed types
	return b
}

// createEvent writes one Event, with its own deadline: an event is best-effort and must not
// outlive the run that records it by more than that.
func createEvent(kube Kube, ev *corev1.Event) error {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultRequestTimeout)
	defer cancel()
	_, err := kube.CreateEvent(ctx, ev)
	return err
}

// PageSize is the page of every namespace-wide list (limit, then continue): the memory a read
// holds is one page of full objects of each kind it lists at once, whatever the namespace's
// size. 100, not client-go's and kubectl's 500: a read lists seven kinds at once inside the
// Rollouts controller's pod, and at 500 a page a read of a 5,000-Pod namespace raised the
// plugin's peak RSS by about 12 MiB, at 100 by about 8, for a few more requests (docs/benchmarks.md).
const PageSize = 100
