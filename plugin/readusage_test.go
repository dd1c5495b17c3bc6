package plugin

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/configmap-attacher/configmap-attacher/test/support/fakemeta"
)

// pagingKube serves ReplicaSet lists page by page (Limit, Continue: the index of the next
// item) from rss, answers the first continued request with 410 Expired when expire is set,
// and blocks StatefulSet lists until the request's deadline when hang is set. Other lists are
// empty.
type pagingKube struct {
	Kube
	rss    []appsv1.ReplicaSet
	expire bool
	hang   bool
	mu     sync.Mutex
	reqs   []string
}

func (k *pagingKube) ListReplicaSets(_ context.Context, _ string, o metav1.ListOptions) (*appsv1.ReplicaSetList, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.reqs = append(k.reqs, fmt.Sprintf("limit=%d continue=%q", o.Limit, o.Continue))
	if o.Continue != "" && k.expire {
		k.expire = false
		return nil, apierrors.NewResourceExpired("the provided continue parameter is too old")
	}
	from, _ := strconv.Atoi(o.Continue)
	to := min(from+int(o.Limit), len(k.rss))
	l := &appsv1.ReplicaSetList{Items: append([]appsv1.ReplicaSet(nil), k.rss[from:to]...)}
	if to < len(k.rss) {
		l.Continue = strconv.Itoa(to)
	}
	return l, nil
}

func (k *pagingKube) ListStatefulSets(ctx context.Context, _ string, _ metav1.ListOptions) (*appsv1.StatefulSetList, error) {
	if k.hang {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return &appsv1.StatefulSetList{}, nil
}

func (k *pagingKube) ListDaemonSets(context.Context, string, metav1.ListOptions) (*appsv1.DaemonSetList, error) {
	return &appsv1.DaemonSetList{}, nil
}

func (k *pagingKube) ListControllerRevisions(context.Context, string, metav1.ListOptions) (*appsv1.ControllerRevisionList, error) {
	return &appsv1.ControllerRevisionList{}, nil
}

func (k *pagingKube) ListJobs(context.Context, string, metav1.ListOptions) (*batchv1.JobList, error) {
	return &batchv1.JobList{}, nil
}

func (k *pagingKube) ListCronJobs(context.Context, string, metav1.ListOptions) (*batchv1.CronJobList, error) {
	return &batchv1.CronJobList{}, nil
}

func (k *pagingKube) ListPods(context.Context, string, metav1.ListOptions) (*corev1.PodList, error) {
	return &corev1.PodList{}, nil
}

func manyReplicaSets(n int, owner k8stypes.UID) []appsv1.ReplicaSet {
	yes := true
	out := make([]appsv1.ReplicaSet, n)
	for i := range out {
		out[i] = appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("rs-%04d", i), Namespace: "ns", UID: k8stypes.UID(fmt.Sprintf("uid-%d", i)),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "argoproj.io/v1alpha1", Kind: "Rollout", Name: "web", UID: owner, Controller: &yes}}},
			Spec: appsv1.ReplicaSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "c",
				VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: fmt.Sprintf("cfg-%d", i)}}}}}}}}}
	}
	return out
}

// TestReadsArePaged: a namespace-wide list is read in pages of PageSize, following continue;
// a continue token that expired (410) restarts the list once from the start, and what the
// first pages gave is not counted twice.
func TestReadsArePaged(t *testing.T) {
	for _, expire := range []bool{false, true} {
		t.Run(fmt.Sprintf("expire=%v", expire), func(t *testing.T) {
			k := &pagingKube{rss: manyReplicaSets(2*PageSize+7, "uid-ro"), expire: expire}
			c := fake.NewClientset()
			a := &Attacher{Client: k, Meta: fakemeta.New(c), Backoff: wait.Backoff{Steps: 1}}
			u, err := a.ReadUsage(context.Background(), "ns", ControllerRef{Kind: KindRollout, Name: "web", UID: "uid-ro"})
			if err != nil {
				t.Fatal(err)
			}
			if len(u.ReplicaSets) != 2*PageSize+7 {
				t.Errorf("%d ReplicaSets, want %d", len(u.ReplicaSets), 2*PageSize+7)
			}
			last := 2*PageSize + 6 // on the third page
			if got := u.UsersOf(Object{KindConfigMap, fmt.Sprintf("cfg-%d", last)}); len(got.ReplicaSets) != 1 ||
				got.ReplicaSets[0].ReplicaSet.Name != fmt.Sprintf("rs-%04d", last) || got.ReplicaSets[0].Controller != ControllerLive {
				t.Errorf("users of cfg-%d: %+v", last, got)
			}
			page := func(from int) string {
				if from == 0 {
					return fmt.Sprintf(`limit=%d continue=""`, PageSize)
				}
				return fmt.Sprintf(`limit=%d continue="%d"`, PageSize, from)
			}
			want := []string{page(0), page(PageSize), page(2 * PageSize)}
			if expire {
				want = append([]string{page(0), page(PageSize)}, want...)
			}
			if strings.Join(k.reqs, "; ") != strings.Join(want, "; ") {
				t.Errorf("requests %v, want %v", k.reqs, want)
			}
			if u.ReplicaSets[0].Spec.Template.Spec.Volumes != nil {
				t.Error("the usage keeps a ReplicaSet's template: only its references are needed")
			}
		})
	}
}

// TestReadOwnReplicaSetsWithoutSelector: a workload without a selector (a workloadRef Rollout
// that takes the Deployment's) still finds its ReplicaSets: all are listed, its UID decides.
func TestReadOwnReplicaSetsWithoutSelector(t *testing.T) {
	k := &pagingKube{rss: append(manyReplicaSets(3, "uid-ro"), manyReplicaSets(2, "uid-other")...)}
	a := &Attacher{Client: k}
	own, err := a.ReadOwnReplicaSets(context.Background(), Workload{Kind: KindRollout, Namespace: "ns", Name: "web", UID: "uid-ro"})
	if err != nil || len(own) != 3 || own[0].Spec.Template.Spec.Volumes == nil {
		t.Errorf("own %d ReplicaSets (with templates?), %v", len(own), err)
	}
}

// TestReadTooLargeSaysWhatToDo: a read that does not finish within the run's deadline is an
// error the caller retries (not a *FailError) that says the namespace is too large to read in
// one run and what to do.
func TestReadTooLargeSaysWhatToDo(t *testing.T) {
	k := &pagingKube{rss: manyReplicaSets(3, "uid-ro"), hang: true}
	a := &Attacher{Client: k, Meta: fakemeta.New(fake.NewClientset()), RequestTimeout: 50 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := a.ReadUsage(ctx, "ns")
	if err == nil || IsPermanent(err) || !strings.Contains(err.Error(), "too large to read in one run") ||
		!strings.Contains(err.Error(), OptInLabel) || !strings.Contains(err.Error(), "split the namespace") {
		t.Errorf("%v (permanent %v)", err, IsPermanent(err))
	}
}
