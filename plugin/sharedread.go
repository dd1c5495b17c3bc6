package plugin

import (
	"context"
	"slices"
	"sync"
	"time"
)

// SharedReads coalesces the namespace-wide reads (ReadUsage) of the runs one process makes at
// once. The Rollouts controller runs up to ten steps concurrently through one plugin process,
// and a release that changes the config of several Rollouts of one namespace starts their
// steps together: each would read the same namespace, each holding a page of every kind while
// it does.
//
// A namespace has at most one read in flight. A run that asks while one is in flight does not
// join it (it began before the run asked, and could miss a user created a moment before): it
// waits for the next read, which starts when the one in flight ends and serves every run that
// asked in between. So every run gets a read that began after it asked, as consistent as a
// read of its own, and a busy namespace is read at most twice for any number of concurrent
// runs. Reads of different namespaces run beside each other, ReadUsage's bound allowing.
//
// The zero value is ready to use; a SharedReads must not be copied after first use.
type SharedReads struct {
	mu sync.Mutex
	ns map[string]*namespaceReads
}

// namespaceReads is one namespace's read in flight (running) and the next one, gathering the
// runs that asked since.
type namespaceReads struct {
	running bool
	next    *sharedRead
}

// sharedRead is one read of a namespace and the runs waiting for it.
type sharedRead struct {
	// Set before the read starts, under SharedReads.mu.
	a     *Attacher
	known []ControllerRef
	// deadline is the latest of the runs' deadlines; unbounded: a run has none.
	deadline  time.Time
	unbounded bool
	waiting   int
	cancel    context.CancelFunc

	done  chan struct{}
	usage *NamespaceUsage
	err   error
}

// Read returns a read of namespace ns's users (ReadUsage) that began after the call, shared
// with the runs of the same namespace that asked before it began. known are the run's workloads
// that exist (the Rollout whose step runs): the read knows every waiting run's. The read runs
// until the latest deadline among its runs, and stops when every run has given up on it. It is
// sent with the Attacher of the run that asked first: the runs of one SharedReads must share
// their clients (a step.Step's do).
func (s *SharedReads) Read(ctx context.Context, a *Attacher, ns string, known ...ControllerRef) (*NamespaceUsage, error) {
	s.mu.Lock()
	if s.ns == nil {
		s.ns = map[string]*namespaceReads{}
	}
	nr := s.ns[ns]
	if nr == nil {
		nr = &namespaceReads{}
		s.ns[ns] = nr
	}
	r := nr.next
	if r == nil {
		r = &sharedRead{a: a, done: make(chan struct{})}
		nr.next = r
	}
	for _, k := range known {
		if !slices.Contains(r.known, k) {
			r.known = append(r.known, k)
		}
	}
	if d, ok := ctx.Deadline(); !ok {
		r.unbounded = true
	} else if d.After(r.deadline) {
		r.deadline = d
	}
	r.waiting++
	if !nr.running {
		s.start(ns, nr)
	}
	s.mu.Unlock()

	select {
	case <-r.done:
		return r.usage, r.err
	case <-ctx.Done():
		s.mu.Lock()
		r.waiting--
		if r.waiting == 0 {
			if r.cancel != nil {
				r.cancel() // started: nobody waits for it any more
			} else if nr.next == r {
				nr.next = nil // not started: it never will be
			}
		}
		s.mu.Unlock()
		return nil, ctx.Err()
	}
}

// start runs nr.next; s.mu is held.
func (s *SharedReads) start(ns string, nr *namespaceReads) {
	r := nr.next
	nr.next, nr.running = nil, true
	var ctx context.Context
	var cancel context.CancelFunc
	if r.unbounded {
		ctx, cancel = context.WithCancel(context.Background())
	} else {
		ctx, cancel = context.WithDeadline(context.Background(), r.deadline)
	}
	r.cancel = cancel
	go func() {
		defer cancel()
		r.usage, r.err = r.a.ReadUsage(ctx, ns, r.known...)
		close(r.done)
		s.mu.Lock()
		defer s.mu.Unlock()
		nr.running = false
		switch {
		case nr.next != nil:
			s.start(ns, nr)
		default:
			delete(s.ns, ns)
		}
	}()
}
