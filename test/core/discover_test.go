package core

import (
	"fmt"
	"strings"
	"testing"

	"github.com/configmap-attacher/configmap-attacher/test/support/realapi"

	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// TestDiscoverTenReplicaSets: discovery on a Rollout with 10 ReplicaSets in history (none
// ever seen by a step) adds every missing reference with one list of ReplicaSets, one list
// per kind and one patch per object; a repeat only reads. A static ConfigMap used by every
// revision but not opted in is never adopted. The figures are logged for the docs.
func TestDiscoverTenReplicaSets(t *testing.T) {
	c := realapi.Shared(t)
	e := realapi.NewEnv(t, c)
	cfg := realapi.ControllerIdentity(t, c, e.NS, "rbac-step-plugin.yaml")
	ro := e.Rollout("web")
	if _, err := e.Admin.CoreV1().ConfigMaps(e.NS).Create(realapi.Ctx(t), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "static"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 10; i++ {
		cm, sec := fmt.Sprintf("cfg-%d", i), fmt.Sprintf("sec-%d", i)
		e.ConfigMap(cm) // opted in (label configmap-attacher/revisioned=true)
		s := e.Secret(sec)
		s.Labels = map[string]string{plugin.OptInLabel: "true"}
		if _, err := e.Admin.CoreV1().Secrets(e.NS).Update(realapi.Ctx(t), s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		e.ReplicaSet(ro, fmt.Sprintf("rev%d", i), realapi.PodSpec([]string{cm, "static"}, []string{sec}))
	}
	counter := cluster.NewCounter()
	s := realapi.NewStep(counter.Wrap(cfg))
	res := realapi.Run(t, s, ro, "rev10", map[string]any{"discover": map[string]any{}})
	realapi.MustSucceed(t, res)
	t.Logf("discover, 10 ReplicaSets, first run: %s (%d requests)", counter, counter.Total())
	// The Rollout's ReplicaSets (by selector), the controller's Lease (absent: no controller
	// maintains the objects), then the namespace's users (7 lists, ReplicaSets among them) and
	// a list per kind of object, and the patches.
	if counter.Count("list", "replicasets") != 2 || counter.Count("get", "leases") != 1 || counter.Count("list", "configmaps") != 1 ||
		counter.Count("list", "secrets") != 1 || counter.Count("patch", "configmaps") != 10 || counter.Count("patch", "secrets") != 10 || counter.Total() != 31 {
		t.Errorf("requests: %s, want the Rollout's ReplicaSets, the Lease, 1 list of each kind (the objects and the namespace's users) and 20 patches", counter)
	}
	if !strings.Contains(res.Message, "discover: added 20 owner reference(s)") {
		t.Errorf("message %q", res.Message)
	}
	rss, _ := e.Admin.AppsV1().ReplicaSets(e.NS).List(realapi.Ctx(t), metav1.ListOptions{})
	for _, rs := range rss.Items {
		i := strings.TrimPrefix(rs.Name, "web-rev")
		for _, k := range []string{"cm", "secret"} {
			name := map[string]string{"cm": "cfg-", "secret": "sec-"}[k] + i
			uids, _, err := e.OwnerUIDs(k, name)
			if err != nil || !uids[string(rs.UID)] || len(uids) != 1 {
				t.Errorf("%s owners %v (%v), want only %s", name, uids, err, rs.Name)
			}
		}
	}
	if uids, _, _ := e.OwnerUIDs("cm", "static"); len(uids) != 0 {
		t.Errorf("static was adopted: %v", uids)
	}
	counter.Reset()
	res = realapi.Run(t, s, ro, "rev10", map[string]any{"discover": map[string]any{}})
	realapi.MustSucceed(t, res)
	t.Logf("discover, 10 ReplicaSets, repeat: %s (%d requests)", counter, counter.Total())
	if counter.Total() != 11 {
		t.Errorf("repeat: %s, want 11 reads (the Rollout's ReplicaSets, the Lease, 2 lists of the objects, 7 of the users) and no patch", counter)
	}
	// Deleting the oldest ReplicaSet collects exactly its objects.
	old, _ := e.Admin.AppsV1().ReplicaSets(e.NS).Get(realapi.Ctx(t), "web-rev1", metav1.GetOptions{})
	e.DeleteRS(old)
	e.WaitGone("cm", "cfg-1")
	e.WaitGone("secret", "sec-1")
	e.StillThere("cm", "cfg-2", 0)
	e.StillThere("cm", "static", 0)
}

// TestDryRunAgainstAPIServer: a dry run reports and writes nothing (resourceVersions stay).
func TestDryRunAgainstAPIServer(t *testing.T) {
	c := realapi.Shared(t)
	e := realapi.NewEnv(t, c)
	cfg := realapi.ControllerIdentity(t, c, e.NS, "rbac-step-plugin.yaml")
	ro := e.Rollout("web")
	e.ReplicaSet(ro, "aaa111", realapi.PodSpec([]string{"cfg"}, nil))
	e.ConfigMap("cfg")
	_, rv, _ := e.OwnerUIDs("cm", "cfg")
	res := realapi.Run(t, realapi.NewStep(cfg), ro, "aaa111", map[string]any{"configMaps": []string{"cfg"}, "discover": map[string]any{}, "dryRun": true})
	if res.Phase != types.PhaseSuccessful || !strings.Contains(res.Message, "would add ConfigMap cfg ← web-aaa111") {
		t.Fatalf("%s: %s", res.Phase, res.Message)
	}
	if uids, rv2, _ := e.OwnerUIDs("cm", "cfg"); len(uids) != 0 || rv2 != rv {
		t.Errorf("dry run changed the object: %v %s→%s", uids, rv, rv2)
	}
}

// TestEventsOnRollout: the step records a Normal event on success and a Warning on failure,
// with the step's message, as the controller's service account (which may create events).
func TestEventsOnRollout(t *testing.T) {
	c := realapi.Shared(t)
	e := realapi.NewEnv(t, c)
	cfg := realapi.ControllerIdentity(t, c, e.NS, "rbac-step-plugin.yaml")
	ro := e.Rollout("web")
	e.ReplicaSet(ro, "aaa111", realapi.PodSpec([]string{"cfg"}, nil))
	e.ConfigMap("cfg")
	e.ConfigMap("unrelated")
	s := realapi.NewStep(cfg)
	s.Events = &plugin.APIEvents{Client: s.Client}
	ok := realapi.Run(t, s, ro, "aaa111", map[string]any{"configMaps": []string{"cfg"}})
	bad := realapi.Run(t, s, ro, "aaa111", map[string]any{"configMaps": []string{"unrelated"}})
	evs, err := e.Admin.CoreV1().Events(e.NS).List(realapi.Ctx(t), metav1.ListOptions{FieldSelector: "involvedObject.kind=Rollout,involvedObject.name=web"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, ev := range evs.Items {
		got[ev.Type+"/"+ev.Reason] = ev.Message
	}
	if got["Normal/"+plugin.ReasonAttached] != ok.Message || got["Warning/"+plugin.ReasonAttachFailed] != bad.Message {
		t.Errorf("events %v", got)
	}
}
