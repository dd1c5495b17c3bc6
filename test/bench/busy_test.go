package bench

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// The busy namespace's other workloads: busyDeployments Deployments with busyRevisions
// revisions each, busyDeployments × busyRevisions unrelated ReplicaSets.
const (
	busyDeployments = 20
	busyRevisions   = 10
	busyLabel       = "bench.configmap-attacher/busy"
)

// busyReplicaSets is how many unrelated ReplicaSets the busy namespace holds.
const busyReplicaSets = busyDeployments * busyRevisions

// BenchmarkStepBusyNamespace: the step's cost with the namespace-wide reads it makes before
// any write (plugin/users.go ReadUsage: every user of an object in the namespace counts), in
// a namespace that also holds 200 unrelated ReplicaSets: 20 Deployments (replicas 0, so no
// Pods and no kubelet), each taken through 10 revisions by the real deployment controller
// (revisionHistoryLimit 10), every pod template mounting a ConfigMap and taking a Secret of
// its own. Beside them the three Rollouts of the benchmark (1, 10 and 100 objects) with one
// ReplicaSet each, as in BenchmarkStepLatency.
//
// One step attaching 1, 10 or 100 objects (fresh: references cleared before, untimed,
// checked after), timed from the caller, the variants interleaved step by step as in
// latencyLeaf: floor (the patches alone), floor+users (the step's reads of the namespace's
// users, concurrently as the step sends them, then the patches: floorUsers), inprocess
// (step.Step as stepplugin.Command builds it) and plugin-rpc (the built binary through go-plugin,
// default client limits, never throttled while timed).
//
// Each leaf also reports, untimed: the API requests of one step (test/support/cluster's counting
// transport around an in-process step.Step with its Event, and around floor+users), the
// heap allocations per step in the benchmark process of floor+users and inprocess
// (runtime.MemStats around each step: client-go decoding the 200 ReplicaSets, and for
// inprocess the plugin's own work on them), and the plugin process's VmRSS and VmHWM after
// the leaf.
func BenchmarkStepBusyNamespace(b *testing.B) {
	e := newEnv(b)
	id := e.controllerIdentity(b)
	t0 := time.Now()
	e.busyNamespace(b)
	b.Logf("created %d Deployments × %d revisions (%d ReplicaSets) in %v", busyDeployments, busyRevisions, busyReplicaSets, time.Since(t0).Round(time.Millisecond))
	// Every set before any leaf: each step sees the same namespace (the other sets' Rollouts
	// make the step list Rollouts too, at every size).
	sets := map[int]*objectSet{}
	for _, size := range latencySizes {
		nCM, nSec := splitObjects(size.objects)
		sets[size.objects] = e.newObjectSet(b, fmt.Sprintf("busy%d", size.objects), nCM, nSec, nil)
	}

	proc := startPlugin(b, plugin.DefaultQPS, plugin.DefaultBurst, e.kubeconfigArgs(b, id)...)
	floor, floorMeta := clientset(b, id), metaClient(b, id)
	inproc := inProcessStep(b, id, true)
	counter := cluster.NewCounter()
	countedID := counter.Wrap(id)
	counted := inProcessStep(b, countedID, false)
	counted.Events = &plugin.APIEvents{Client: counted.Client, Log: counted.Log} // the Event counted with its step
	countedFloor, countedFloorMeta := clientset(b, countedID), metaClient(b, countedID)

	for _, size := range latencySizes {
		set := sets[size.objects]
		objs, body := set.objects(), ownerPatch(set.rs)
		floorUsersStep := func(cs kubernetesClients) func(ctx context.Context) error {
			return func(ctx context.Context) error {
				if err := floorUsers(ctx, cs.kube, cs.meta, e.ns, set.ro.UID, ""); err != nil {
					return err
				}
				return floorMetaPatches(ctx, cs.meta, e.ns, objs, body)
			}
		}
		variants := []variant{
			{name: vFloor, step: func(ctx context.Context) error { return floorMetaPatches(ctx, floorMeta, e.ns, objs, body) }},
			{name: vFloorUsers, allocs: true, step: floorUsersStep(kubernetesClients{floor, floorMeta})},
			{name: vInProc, allocs: true, step: func(context.Context) error { return checkResult(inproc.Run(set.ro, stepContext(set))) }},
			{name: vPluginRPC, proc: proc, tokens: size.objects + usersTokens, step: func(context.Context) error {
				return checkResult(proc.step.Run(set.ro, stepContext(set)))
			}},
		}
		warmUp(b, e, set, variants)
		b.Run(fmt.Sprintf("objects=%d/%s", size.objects, modeFresh), func(b *testing.B) {
			// The requests of one step, counted before the timed steps (untimed: b.Loop has
			// not started the timer yet).
			countOne := func(step func() error) map[string]int {
				e.resetOwners(b, objs)
				time.Sleep(20 * time.Millisecond)
				counter.Reset()
				err := step()
				snap := counter.Snapshot()
				if err != nil {
					b.Fatal(err)
				}
				e.verifyOwned(b, set)
				m := map[string]int{}
				for k, v := range snap {
					m[k.String()] = v
				}
				return m
			}
			pluginReqs := countOne(func() error { return checkResult(counted.Run(set.ro, stepContext(set))) })
			floorReqs := countOne(func() error {
				ctx, cancel := bg()
				defer cancel()
				return floorUsersStep(kubernetesClients{countedFloor, countedFloorMeta})(ctx)
			})

			rec := latencyLeaf(b, e, set, true, size.steps, variants)
			rec.Requests, rec.FloorRequests = pluginReqs, floorReqs
			total, lists := 0, 0
			for k, v := range pluginReqs {
				total += v
				if strings.HasPrefix(k, "list ") {
					lists += v
				}
			}
			rec.metric(b, "requests/op", float64(total))
			rec.metric(b, "list-requests/op", float64(lists))
			ftotal := 0
			for _, v := range floorReqs {
				ftotal += v
			}
			rec.metric(b, "floor-users-requests/op", float64(ftotal))
			rec.metric(b, "plugin-rss-MiB", mib(mustRSS(b, proc.pid, "VmRSS")))
			rec.metric(b, "plugin-hwm-MiB", mib(mustRSS(b, proc.pid, "VmHWM")))
			run.add(b, rec)
		})
	}
}

// kubernetesClients are a floor's typed and metadata clients.
type kubernetesClients struct {
	kube kubernetes.Interface
	meta metadata.Interface
}

// busyNamespace creates the busy namespace's other workloads and waits until the deployment
// controller has made every revision's ReplicaSet and has nothing left to do.
// When the benchmark ends the Deployments are deleted and their ReplicaSets waited for (up to a
// minute), so that the garbage collector's work does not overlap the next benchmark.
func (e *env) busyNamespace(b *testing.B) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		bgProp := metav1.DeletePropagationBackground
		if err := e.admin.AppsV1().Deployments(e.ns).DeleteCollection(ctx, metav1.DeleteOptions{PropagationPolicy: &bgProp},
			metav1.ListOptions{LabelSelector: busyLabel}); err != nil {
			b.Logf("deleting the other workloads: %v", err)
			return
		}
		for ctx.Err() == nil {
			rss, err := e.admin.AppsV1().ReplicaSets(e.ns).List(ctx, metav1.ListOptions{LabelSelector: busyLabel})
			if err != nil || len(rss.Items) == 0 {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
	zero, history := int32(0), int32(busyRevisions)
	var g errgroup.Group
	g.SetLimit(8)
	for i := 0; i < busyDeployments; i++ {
		name := fmt.Sprintf("other%02d", i)
		labels := map[string]string{"app": name, busyLabel: "true"}
		c := corev1.Container{Name: "app", Image: "nginx", Env: []corev1.EnvVar{{Name: "APP", Value: name}},
			EnvFrom:      []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: name + "-env"}}}},
			VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/app"}}}
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns, Labels: labels},
			Spec: appsv1.DeploymentSpec{Replicas: &zero, RevisionHistoryLimit: &history,
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{"bench/revision": "1"}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{c}, Volumes: []corev1.Volume{{Name: "config",
						VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: name + "-config"}}}}}}},
			},
		}
		g.Go(func() error {
			_, err := e.admin.AppsV1().Deployments(e.ns).Create(ctx, d, metav1.CreateOptions{})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	e.waitBusy(b, ctx, busyDeployments)
	for rev := 2; rev <= busyRevisions; rev++ {
		patch := []byte(fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"bench/revision":"%d"}}}}}`, rev))
		for i := 0; i < busyDeployments; i++ {
			name := fmt.Sprintf("other%02d", i)
			g.Go(func() error {
				_, err := e.admin.AppsV1().Deployments(e.ns).Patch(ctx, name, ktypes.StrategicMergePatchType, patch, metav1.PatchOptions{})
				return err
			})
		}
		if err := g.Wait(); err != nil {
			b.Fatal(err)
		}
		e.waitBusy(b, ctx, busyDeployments*rev)
	}
	// Let the controllers' last status writes land before anything is timed.
	time.Sleep(2 * time.Second)
}

// waitBusy waits until the namespace holds want ReplicaSets of the other workloads and every
// Deployment's status has caught up with its spec.
func (e *env) waitBusy(b *testing.B, ctx context.Context, want int) {
	b.Helper()
	var got int
	for {
		rss, err := e.admin.AppsV1().ReplicaSets(e.ns).List(ctx, metav1.ListOptions{LabelSelector: busyLabel})
		if err != nil {
			b.Fatal(err)
		}
		got = len(rss.Items)
		if got == want {
			ds, err := e.admin.AppsV1().Deployments(e.ns).List(ctx, metav1.ListOptions{LabelSelector: busyLabel})
			if err != nil {
				b.Fatal(err)
			}
			settled := true
			for _, d := range ds.Items {
				if d.Status.ObservedGeneration != d.Generation {
					settled = false
				}
			}
			if settled {
				return
			}
		}
		if got > want {
			b.Fatalf("%d ReplicaSets of the other workloads, want %d", got, want)
		}
		select {
		case <-ctx.Done():
			b.Fatalf("waiting for %d ReplicaSets of the other workloads (have %d): %v", want, got, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
