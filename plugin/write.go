package plugin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
)

// The write, below the plan: per object, the live confirmation of a stale view's owners
// (confirm.go), the final owners (decideOwners), one add-only patch (send.go), the wait for a
// listed object not created yet; the dry run; and the outcome.

// dryRun reads the listed objects' metadata and reports exactly which owner references a run
// would add. Discovery's additions come from its list already.
func (a *Attacher) dryRun(ctx context.Context, ns string, res Result) (Result, error) {
	for _, w := range res.Writes {
		if !w.Listed {
			res.Added = append(res.Added, w)
			continue
		}
		m, err := a.getMeta(ctx, ns, w.Object)
		if err != nil {
			return res, err
		}
		if m == nil {
			res.NotFound = append(res.NotFound, w.Object)
			continue
		}
		if refusal := w.recheck.check(w.Object, m.Labels); refusal != "" {
			return res, &FailError{refusal}
		}
		// What a run would add now: the owners neither the plan's read nor this one shows.
		f := w.facts
		f.has = append(slices.Clone(f.has), m.Owners...)
		if add := decideOwners(f).add; len(add) > 0 {
			res.Added = append(res.Added, Write{Object: w.Object, Owners: add, Listed: true})
		}
	}
	res.Message = res.dryRunMessage()
	return res, nil
}

// finish is the run's result once its writes are done: what went through, the warnings and
// per-object errors of discovered objects, and the verdict (writeOutcome.err) or the message.
func (r Result) finish(out writeOutcome) (Result, error) {
	r.Added = out.added
	r.Warnings = append(r.Warnings, out.warnings...)
	r.Errors = out.objectErrors
	if err := out.err(); err != nil {
		return r, err
	}
	r.Message = r.message()
	return r, nil
}

// writeOutcome collects what the patches did.
type writeOutcome struct {
	ns           string
	source       string // what the explicit list is called
	rbacHint     string
	added        []Write
	missing      []Object
	forbidden    map[Object]string
	rejected     map[Object]string
	refused      []string
	warnings     []string
	objectErrors []ObjectError
	transient    error
}

// write sends the patches, Concurrency at a time. A listed object that does not exist is
// tried again for CreationWait. A transient error that outlived its retries stops the patches
// not yet sent: the controller retries the whole step anyway, and 100 objects each waiting out
// their own retries would hold the controller's worker for minutes.
func (a *Attacher) write(ctx context.Context, ns string, ws []Write) writeOutcome {
	out := writeOutcome{ns: ns, rbacHint: a.rbacHint(), forbidden: map[Object]string{}, rejected: map[Object]string{}}
	if len(ws) == 0 {
		return out
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	var g errgroup.Group
	g.SetLimit(a.concurrency())
	for _, w := range ws {
		g.Go(func() error {
			if ctx.Err() != nil {
				return nil // abandoned after a transient failure; out.transient says why
			}
			err := guard(w.Object, func() error { return a.writeOne(ctx, ns, &w) })
			mu.Lock()
			defer mu.Unlock()
			out.record(w, err, ctx.Err() != nil, cancel)
			return nil
		})
	}
	_ = g.Wait()
	sortWrites(out.added)
	sortObjects(out.missing)
	for _, w := range out.added {
		a.log().WithFields(map[string]any{"object": w.Object.String(), "owners": strings.Join(w.Names(), ",")}).Debug("owner references in place")
	}
	return out
}

// awaitCreation retries the patch of a listed object that was not found, for CreationWait. An
// object whose labels a rule needs (w.recheck) is read first, its labels checked and its UID
// made the patch's precondition: the object patched is the object checked.
func (a *Attacher) awaitCreation(ctx context.Context, ns string, w Write) error {
	deadline := time.Now().Add(a.creationWait())
	var err error
	for {
		wait := min(time.Second, a.creationWait())
		select {
		case <-ctx.Done():
			return notFound(w.Object) // the last answer was 404; the caller's time is up
		case <-time.After(wait):
		}
		err = a.recheckedPatch(ctx, ns, w)
		if err == nil || !isNotFound(err) || !time.Now().Before(deadline) {
			return err
		}
	}
}

// recheckedPatch is the patch of a listed object that appeared after the label check.
func (a *Attacher) recheckedPatch(ctx context.Context, ns string, w Write) error {
	if w.recheck == nil {
		return a.patch(ctx, ns, w.Object, w.ObjectUID, w.Owners)
	}
	m, err := a.getMeta(ctx, ns, w.Object)
	switch {
	case err != nil:
		return err
	case m == nil:
		return notFound(w.Object)
	}
	if refusal := w.recheck.check(w.Object, m.Labels); refusal != "" {
		return &FailError{refusal}
	}
	w.ObjectUID = m.UID
	return a.patch(ctx, ns, w.Object, w.ObjectUID, w.Owners)
}

func (o *writeOutcome) record(w Write, err error, cancelled bool, cancel func()) {
	switch {
	case err != nil && cancelled && o.transient != nil:
		// Cancelled by a sibling's transient failure: already reported.
	case err == nil:
		o.added = append(o.added, w)
	case isAllGone(err):
		// Nothing to add: the view was stale. Not a problem of the object.
	case !w.Listed:
		// An older ReplicaSet's object found by discovery: the explicit list decides the verdict.
		msg := discoverWriteWarning(w, err)
		if isForbidden(err) {
			msg = forbiddenMessage([]Object{w.Object}, apiMessage(err), o.ns, o.rbacHint)
		}
		o.warnings = append(o.warnings, msg)
		o.objectErrors = append(o.objectErrors, ObjectError{w.Object, err})
		if isTransient(err) && o.transient == nil {
			o.transient = fmt.Errorf("patching %s: %w", w.Object, err)
			cancel()
		}
	case isNotFound(err):
		o.missing = append(o.missing, w.Object)
	case IsPermanent(err):
		o.refused = append(o.refused, err.Error())
	case isForbidden(err):
		o.forbidden[w.Object] = apiMessage(err)
	case isTransient(err):
		if o.transient == nil {
			o.transient = fmt.Errorf("patching %s: %w", w.Object, err)
		}
		cancel()
	default:
		o.rejected[w.Object] = apiMessage(err)
	}
}

// writeOne is one object's write, its layers in order: the live confirmation of a stale
// view's owners (confirm.go), the final owners (decideOwners), the patch (send.go), and the
// grace for a listed object not created yet.
func (a *Attacher) writeOne(ctx context.Context, ns string, w *Write) error {
	var err error
	if w.verify {
		// A stale view: the owners are decided again with what a live read shows of them.
		f := w.facts
		if f.live, err = a.confirmOwners(ctx, ns, w.Owners); err != nil {
			w.Owners = nil
		} else if w.Owners = decideOwners(f).add; len(w.Owners) == 0 {
			err = errAllGone
		}
	}
	if err == nil {
		err = a.patch(ctx, ns, w.Object, w.ObjectUID, w.Owners)
	}
	if err != nil && isNotFound(err) && w.Listed {
		err = a.awaitCreation(ctx, ns, *w)
	}
	return err
}

// guard runs f and turns a panic into an error: the write goroutines are outside the RPC
// layer's recover, and a panic there would kill the process every Rollout shares.
func guard(o Object, f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("internal error patching %s: %v", o, r)
		}
	}()
	return f()
}

// err turns the outcome into the verdict: nil when every listed object is attached, a
// *FailError for problems a retry cannot fix (missing, forbidden, rejected), or the
// transient error for the caller to retry.
func (o writeOutcome) err() error {
	var parts []string
	if len(o.missing) > 0 {
		parts = append(parts, notFoundMessage(o.missing, o.ns, o.source))
	}
	if len(o.forbidden) > 0 {
		objs := keysOf(o.forbidden)
		parts = append(parts, forbiddenMessage(objs, o.forbidden[objs[0]], o.ns, o.rbacHint))
	}
	for _, obj := range keysOf(o.rejected) {
		parts = append(parts, rejectedMessage(obj, o.rejected[obj]))
	}
	parts = append(parts, o.refused...)
	if len(parts) > 0 {
		return &FailError{strings.Join(parts, "; ") + o.written()}
	}
	if o.transient != nil {
		return &partialError{err: o.transient, written: o.written()}
	}
	return nil
}

// written says what was patched before a failure: the run is not all-or-nothing (each object
// is its own request), and what went through is correct and stays.
func (o writeOutcome) written() string { return writtenBefore(o.added) }

// partialError is a transient failure that says what was written before it.
type partialError struct {
	err     error
	written string
}

func (e *partialError) Error() string { return e.err.Error() + e.written }

func (e *partialError) Unwrap() error { return e.err }

func keysOf(m map[Object]string) []Object {
	out := make([]Object, 0, len(m))
	for o := range m {
		out = append(out, o)
	}
	sortObjects(out)
	return out
}

// errAllGone: every ReplicaSet a write would add no longer exists (the caller's view was
// stale); nothing is written, and the caller's view catches up.
var errAllGone = errors.New("every ReplicaSet to add is gone")

// isAllGone reports a write skipped because its ReplicaSets no longer exist.
func isAllGone(err error) bool { return errors.Is(err, errAllGone) }
