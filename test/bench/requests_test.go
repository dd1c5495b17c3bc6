package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// requestSteps is how many steps each request-count leaf runs per invocation.
const requestSteps = 3

// BenchmarkAPIRequests counts the API requests of one step with test/support/cluster's counting
// transport around an in-process step.Step built as stepplugin.Command builds it (events on the
// Rollout included), on the plugin's identity. The child process's requests cannot be
// wrapped; the code path is the same. Counts do not depend on client-side limits.
//
// explicit: a step listing 1, 10 or 100 objects; fresh (references cleared before, untimed)
// and repeat (already attached). discover: `discover: {}` on a Rollout with 10 ReplicaSets in
// history (each with its own opted-in ConfigMap and Secret, plus a static ConfigMap that is
// not opted in); first run (references cleared before) and repeat.
func BenchmarkAPIRequests(b *testing.B) {
	e := newEnv(b)
	id := e.controllerIdentity(b)
	counter := cluster.NewCounter()
	// The Event is counted with its step: the plugin sends the same request in the
	// background (plugin.AsyncEvents), which would land in whichever step's count is open.
	s := inProcessStep(b, counter.Wrap(id), false)
	s.Events = &plugin.APIEvents{Client: s.Client, Log: s.Log}

	for _, n := range []int{1, 10, 100} {
		nCM, nSec := splitObjects(n)
		set := e.newObjectSet(b, fmt.Sprintf("req%d", n), nCM, nSec, nil)
		for _, mode := range []string{modeFresh, "repeat"} {
			b.Run(fmt.Sprintf("explicit/objects=%d/%s", n, mode), func(b *testing.B) {
				requestLeaf(b, counter, func() {
					if mode == modeFresh {
						e.resetOwners(b, set.objects())
					}
				}, func() error { return checkResult(s.Run(set.ro, stepContext(set))) }, func() {
					e.verifyOwned(b, set)
				})
			})
		}
	}

	d := e.discoverFixture(b)
	config := json.RawMessage(`{"discover":{}}`)
	for _, mode := range []string{"first", "repeat"} {
		b.Run("discover/replicasets=10/"+mode, func(b *testing.B) {
			requestLeaf(b, counter, func() {
				if mode == "first" {
					e.resetOwners(b, d.objs)
				}
			}, func() error {
				res, rerr := s.Run(d.ro, &types.RpcStepContext{PluginName: pluginName, Config: config})
				if err := checkResult(res, rerr); err != nil {
					return err
				}
				if mode == "first" && !strings.Contains(res.Message, "discover: added 20 owner reference(s)") {
					return fmt.Errorf("message %q, want 20 references added", res.Message)
				}
				return nil
			}, func() { d.verify(b, e) })
		})
	}
}

// requestLeaf runs requestSteps steps, each after prepare (untimed), counting the requests
// of the step alone, and reports requests per step by verb and resource.
func requestLeaf(b *testing.B, counter *cluster.Counter, prepare func(), step func() error, verify func()) {
	var samples []time.Duration
	var per map[string]int
	for b.Loop() {
		for i := 0; i < requestSteps; i++ {
			b.StopTimer()
			prepare()
			time.Sleep(20 * time.Millisecond)
			counter.Reset()
			b.StartTimer()
			t0 := time.Now()
			err := step()
			d := time.Since(t0)
			b.StopTimer()
			m := counter.ByName()
			if err != nil {
				b.Fatal(err)
			}
			verify()
			if per != nil && fmt.Sprint(per) != fmt.Sprint(m) {
				b.Fatalf("requests differ between steps: %v then %v", per, m)
			}
			per = m
			samples = append(samples, d)
			b.StartTimer()
		}
	}
	rec := reportLatency(b, samples)
	rec.Requests = per
	total := 0
	for k, v := range per {
		total += v
		rec.metric(b, strings.ReplaceAll(k, " ", "-")+"/op", float64(v))
	}
	rec.metric(b, "requests/op", float64(total))
	run.add(b, rec)
}

// discoverFixture is a Rollout with 10 ReplicaSets (rev1…rev10, rev10 current), each using
// its own opted-in ConfigMap cfg-i and Secret sec-i and a shared, not opted-in ConfigMap.
type discoverFixture struct {
	ro   *v1alpha1.Rollout
	rss  map[string]string // object name → owning ReplicaSet UID
	objs []objRef
}

func (e *env) discoverFixture(b *testing.B) *discoverFixture {
	b.Helper()
	ctx, cancel := bg()
	defer cancel()
	set := e.newObjectSet(b, "disc", 0, 0, nil) // the Rollout only; its ReplicaSets follow
	if err := e.admin.AppsV1().ReplicaSets(e.ns).Delete(ctx, set.rs.Name, metav1.DeleteOptions{}); err != nil {
		b.Fatal(err)
	}
	if _, err := e.admin.CoreV1().ConfigMaps(e.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "disc-static"},
		Data: map[string]string{"app.yaml": payload}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	d := &discoverFixture{rss: map[string]string{}}
	opted := map[string]string{plugin.OptInLabel: "true", setLabel: "disc"}
	var last *appsv1.ReplicaSet
	for i := 1; i <= 10; i++ {
		cm, sec := fmt.Sprintf("disc-cfg-%d", i), fmt.Sprintf("disc-sec-%d", i)
		if _, err := e.admin.CoreV1().ConfigMaps(e.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cm, Labels: opted},
			Data: map[string]string{"app.yaml": payload}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		if _, err := e.admin.CoreV1().Secrets(e.ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: sec, Labels: opted},
			Data: map[string][]byte{"token": []byte(payload)}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		rs := e.replicaSet(b, ctx, set.ro, fmt.Sprintf("rev%d", i), podSpec([]string{cm, "disc-static"}, []string{sec}))
		last = rs
		d.rss[cm], d.rss[sec] = string(rs.UID), string(rs.UID)
		d.objs = append(d.objs, objRef{false, cm}, objRef{true, sec})
		time.Sleep(10 * time.Millisecond) // distinct creation order
	}
	d.ro = cluster.AsController(set.ro, last)
	return d
}

// verify checks that each opted-in object has exactly the ReplicaSet that uses it as owner,
// and that the static ConfigMap was not adopted.
func (d *discoverFixture) verify(b *testing.B, e *env) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cms, err := e.admin.CoreV1().ConfigMaps(e.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	secs, err := e.admin.CoreV1().Secrets(e.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	var metas []metav1.ObjectMeta
	for _, o := range cms.Items {
		metas = append(metas, o.ObjectMeta)
	}
	for _, o := range secs.Items {
		metas = append(metas, o.ObjectMeta)
	}
	seen := 0
	for _, m := range metas {
		if m.Name == "disc-static" && len(m.OwnerReferences) != 0 {
			b.Fatalf("disc-static was adopted: %+v", m.OwnerReferences)
		}
		uid, ok := d.rss[m.Name]
		if !ok {
			continue
		}
		seen++
		if len(m.OwnerReferences) != 1 || string(m.OwnerReferences[0].UID) != uid {
			b.Fatalf("%s: owners %+v, want only %s", m.Name, m.OwnerReferences, uid)
		}
	}
	if seen != 20 {
		b.Fatalf("saw %d discover objects, want 20", seen)
	}
}
