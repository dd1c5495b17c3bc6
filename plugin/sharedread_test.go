package plugin

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/configmap-attacher/configmap-attacher/test/support/fakemeta"
)

// gatedKube is a pagingKube whose first ReplicaSet list takes its answer and then waits at the
// gate: a read in flight whose view of the namespace is already taken.
type gatedKube struct {
	*pagingKube
	taken chan struct{} // closed when the first list has its answer
	gate  chan struct{} // the first list returns when it is closed
	once  sync.Once
	lists int
}

func (k *gatedKube) ListReplicaSets(ctx context.Context, ns string, o metav1.ListOptions) (*appsv1.ReplicaSetList, error) {
	l, err := k.pagingKube.ListReplicaSets(ctx, ns, o)
	k.mu.Lock()
	k.lists++
	k.mu.Unlock()
	first := false
	k.once.Do(func() { first = true })
	if first {
		close(k.taken)
		<-k.gate
	}
	return l, err
}

func (k *gatedKube) reads() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lists
}

// gatedWorld is a namespace of one ReplicaSet behind a gatedKube, and an Attacher reading it.
func gatedWorld() (*pagingKube, *gatedKube, *Attacher) {
	base := &pagingKube{rss: manyReplicaSets(1, "uid-web")}
	k := &gatedKube{pagingKube: base, taken: make(chan struct{}), gate: make(chan struct{})}
	return base, k, &Attacher{Client: k, Meta: fakemeta.New(fake.NewClientset()), Backoff: wait.Backoff{Steps: 1}}
}

// TestSharedReadsCoalesce: runs of one namespace that ask while a read is in flight share the
// next read, which begins after they asked: a ReplicaSet created after the read in flight took
// its view is seen by them (joining the read in flight would miss it), the namespace is read
// twice for three runs, and the shared read knows every waiting run's workload.
func TestSharedReadsCoalesce(t *testing.T) {
	base, k, a := gatedWorld()
	var s SharedReads
	web := ControllerRef{Kind: KindRollout, Name: "web", UID: "uid-web"}
	api := ControllerRef{Kind: KindRollout, Name: "api", UID: "uid-api"}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	type got struct {
		u   *NamespaceUsage
		err error
	}
	first := make(chan got, 1)
	go func() {
		u, err := s.Read(ctx, a, "ns", web)
		first <- got{u, err}
	}()
	<-k.taken
	// Created after the read in flight took its view: only a later read sees it.
	rsNew := manyReplicaSets(1, "uid-api")[0]
	rsNew.Name, rsNew.UID, rsNew.OwnerReferences[0].Name = "rs-new", "uid-rs-new", "api"
	rsNew.Spec.Template.Spec.Volumes[0].ConfigMap.Name = "cfg-new"
	base.mu.Lock()
	base.rss = append(base.rss, rsNew)
	base.mu.Unlock()

	later := make(chan got, 2)
	for _, known := range []ControllerRef{web, api} {
		go func() {
			u, err := s.Read(ctx, a, "ns", known)
			later <- got{u, err}
		}()
	}
	// Both wait for the next read, which has not started while the first is in flight.
	time.Sleep(100 * time.Millisecond)
	if n := k.reads(); n != 1 {
		t.Fatalf("%d ReplicaSet lists while the first read is in flight, want 1", n)
	}
	close(k.gate)

	f := <-first
	if f.err != nil {
		t.Fatal(f.err)
	}
	if users := f.u.UsersOf(Object{KindConfigMap, "cfg-new"}); len(users.ReplicaSets) != 0 {
		t.Errorf("the first read saw %v: its view was taken before rs-new existed", users)
	}
	b, c := <-later, <-later
	if b.err != nil || c.err != nil {
		t.Fatal(b.err, c.err)
	}
	if b.u != c.u {
		t.Error("the two runs that asked during the first read got two reads, want one shared")
	}
	if b.u == f.u {
		t.Fatal("a run that asked during the first read got that read: it began before the run asked")
	}
	users := b.u.UsersOf(Object{KindConfigMap, "cfg-new"})
	if len(users.ReplicaSets) != 1 || users.ReplicaSets[0].ReplicaSet.Name != "rs-new" {
		t.Fatalf("users of cfg-new in the later read: %+v, want rs-new", users)
	}
	if users.ReplicaSets[0].Controller != ControllerLive {
		t.Errorf("rs-new's controller is %v in the shared read, want live: the read knows every waiting run's workload", users.ReplicaSets[0].Controller)
	}
	if n := k.reads(); n != 2 {
		t.Errorf("%d reads for three runs, want 2", n)
	}
}

// TestSharedReadsGiveUp: a run whose deadline passes while it waits returns its context's
// error; a run that asks afterwards still gets a read of its own.
func TestSharedReadsGiveUp(t *testing.T) {
	_, k, a := gatedWorld()
	var s SharedReads
	web := ControllerRef{Kind: KindRollout, Name: "web", UID: "uid-web"}

	done := make(chan error, 1)
	go func() {
		_, err := s.Read(context.Background(), a, "ns", web)
		done <- err
	}()
	<-k.taken
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := s.Read(short, a, "ns", web); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a run that gave up waiting: %v, want its deadline", err)
	}
	close(k.gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ctx, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	if u, err := s.Read(ctx, a, "ns", web); err != nil || len(u.ReplicaSets) != 1 {
		t.Errorf("a read after the abandoned one: %v, %v", u, err)
	}
	if n := k.reads(); n != 2 {
		t.Errorf("%d reads, want 2 (the abandoned run's was never started)", n)
	}
}
