package plugin

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestDecideOwners: the one function that decides an object's owners, rule by rule, from what
// a run read and (for a stale view) what the live confirmation found.
func TestDecideOwners(t *testing.T) {
	yes := true
	of := func(kind, name, uid string) *metav1.OwnerReference {
		return &metav1.OwnerReference{APIVersion: "apps/v1", Kind: kind, Name: name, UID: types.UID(uid), Controller: &yes}
	}
	rs := func(name string, ctrl *metav1.OwnerReference) Owner {
		return Owner{Name: name, UID: types.UID("uid-" + name), Controller: ctrl}
	}
	user := func(o Owner, c ControllerState) ReplicaSetUser { return ReplicaSetUser{ReplicaSet: o, Controller: c} }
	web, api := of(KindRollout, "web", "uid-web"), of(KindDeployment, "api", "uid-api")
	web1, web2, api1 := rs("web-1", web), rs("web-2", web), rs("api-1", api)
	deleting := rs("web-0", web)
	deleting.Deleting = true
	bare := rs("bare", nil)
	target := rs("web-3", web)
	jobs := make([]OwnerUser, MaxUserOwners+1)
	for i := range jobs {
		jobs[i] = OwnerUser{Owner: Owner{Kind: OwnerJob, Name: fmt.Sprintf("job-%d", i), UID: types.UID(fmt.Sprintf("uid-job-%d", i))}}
	}
	crowd := Owner{Kind: OwnerControllerRevision, Name: "crowd", UID: "uid-crowd"}
	for _, c := range []struct {
		name           string
		f              ownerFacts
		want, add      []string // owner names
		blockersSubstr string   // "" when none
	}{
		{"every live ReplicaSet that uses it, whatever its workload",
			ownerFacts{users: Users{ReplicaSets: []ReplicaSetUser{user(web1, ControllerLive), user(api1, ControllerLive), user(bare, ControllerNone)}}},
			[]string{"web-1", "api-1", "bare"}, []string{"web-1", "api-1", "bare"}, ""},
		{"a ReplicaSet being deleted never owns",
			ownerFacts{users: Users{ReplicaSets: []ReplicaSetUser{user(deleting, ControllerLive), user(web1, ControllerLive)}}},
			[]string{"web-1"}, []string{"web-1"}, ""},
		{"a ReplicaSet whose controller is gone never owns",
			ownerFacts{users: Users{ReplicaSets: []ReplicaSetUser{user(web1, ControllerGone), user(web2, ControllerLive)}}},
			[]string{"web-2"}, []string{"web-2"}, ""},
		{"a controller whose existence cannot be confirmed blocks",
			ownerFacts{users: Users{ReplicaSets: []ReplicaSetUser{user(web1, ControllerLive), user(api1, ControllerUnknown)}}},
			[]string{"web-1"}, []string{"web-1"}, "cannot confirm"},
		{"a user that cannot own blocks",
			ownerFacts{users: Users{ReplicaSets: []ReplicaSetUser{user(web1, ControllerLive)}, Others: []OtherUser{{"StatefulSet", "cache"}}}},
			[]string{"web-1"}, []string{"web-1"}, "StatefulSet cache"},
		{"an unreferenced listed object: the target",
			ownerFacts{forced: &target},
			[]string{"web-3"}, []string{"web-3"}, ""},
		{"the target once, when it is a user too",
			ownerFacts{users: Users{ReplicaSets: []ReplicaSetUser{user(target, ControllerLive)}}, forced: &target},
			[]string{"web-3"}, []string{"web-3"}, ""},
		{"owners it has are not added again",
			ownerFacts{users: Users{ReplicaSets: []ReplicaSetUser{user(web1, ControllerLive), user(web2, ControllerLive)}},
				has: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1", UID: "uid-web-1"}}},
			[]string{"web-1", "web-2"}, []string{"web-2"}, ""},
		{"a scoped run's shared object: its workload's own ReplicaSets only, no blockers",
			ownerFacts{users: Users{ReplicaSets: []ReplicaSetUser{user(web1, ControllerLive), user(api1, ControllerLive)}, Others: []OtherUser{{"StatefulSet", "cache"}}},
				only: &Workload{Kind: KindRollout, Name: "web", UID: "uid-web"}},
			[]string{"web-1"}, []string{"web-1"}, ""},
		{"confirmed live: only those a live read shows",
			ownerFacts{users: Users{ReplicaSets: []ReplicaSetUser{user(web1, ControllerLive), user(web2, ControllerLive)}},
				live: map[types.UID]bool{"uid-web-2": true}},
			[]string{"web-1", "web-2"}, []string{"web-2"}, ""},
		{"confirmed, none live: nothing to send",
			ownerFacts{users: Users{ReplicaSets: []ReplicaSetUser{user(web1, ControllerLive)}}, live: map[types.UID]bool{}},
			[]string{"web-1"}, nil, ""},
		{"Jobs past MaxUserOwners: their crowd anchor instead",
			ownerFacts{users: Users{ReplicaSets: []ReplicaSetUser{user(web1, ControllerLive)}, Owners: jobs, Crowd: &crowd}},
			[]string{"web-1", "ControllerRevision crowd"}, []string{"web-1", "ControllerRevision crowd"}, ""},
		{"Jobs past MaxUserOwners, the crowd anchor not there yet: they wait for it",
			ownerFacts{users: Users{Owners: jobs}},
			nil, nil, AnchorPending},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := decideOwners(c.f)
			if got := ownerNames(d.want); !slices.Equal(got, c.want) {
				t.Errorf("want = %v, expected %v", got, c.want)
			}
			if got := ownerNames(d.add); !slices.Equal(got, c.add) {
				t.Errorf("add = %v, expected %v", got, c.add)
			}
			b := strings.Join(d.blockers, "; ")
			if (c.blockersSubstr == "") != (b == "") || !strings.Contains(b, c.blockersSubstr) {
				t.Errorf("blockers = %q, expected one naming %q", b, c.blockersSubstr)
			}
		})
	}
}

func ownerNames(owners []Owner) []string {
	var out []string
	for _, o := range owners {
		out = append(out, o.String())
	}
	return out
}
