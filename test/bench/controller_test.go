package bench

// Benchmarks of `configmap-attacher controller` (the built binary, as its own process) on the
// real control plane. ReplicaSets are created directly (replicas 0, controlled by a Rollout
// object that nothing reconciles) rather than by 1,000 Rollouts under the real controller on
// 2 cores. Figures go to the benchmark log (b.Logf, b.ReportMetric); docs/controller.md
// quotes them.
//
//	go test -run '^$' -bench BenchmarkController -benchtime 1x -timeout 60m ./test/bench

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"golang.org/x/sync/errgroup"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

const ctlPrefix = "configmap_attacher_controller_"

// ctlWorkload is a Rollout object and its ReplicaSets.
type ctlWorkload struct {
	ro  *v1alpha1.Rollout
	rss []*appsv1.ReplicaSet
}

// ctlSpec is a realistic pod template: an image, plain env, resources and probes (what the
// cache transform drops) beside the references (what it keeps).
func ctlSpec(cms, secrets []string) corev1.PodSpec {
	c := corev1.Container{Name: "app", Image: "registry.example.com/team/web@sha256:" + strings.Repeat("a", 64),
		Args:           []string{"--config=/etc/app/app.yaml", "--listen=:8080"},
		Env:            []corev1.EnvVar{{Name: "LOG_LEVEL", Value: "info"}, {Name: "REGION", Value: "eu-west-1"}, {Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
		Resources:      corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")}},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromInt32(8080)}}},
	}
	var vols []corev1.Volume
	for _, cm := range cms {
		vols = append(vols, corev1.Volume{Name: cm, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm}}}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: cm, MountPath: "/etc/" + cm})
	}
	for _, s := range secrets {
		c.EnvFrom = append(c.EnvFrom, corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: s}}})
	}
	return corev1.PodSpec{Containers: []corev1.Container{c}, Volumes: vols}
}

// populate creates n Rollouts with rsPer ReplicaSets each; ReplicaSet j of workload i uses
// ConfigMap w<i>-c<j> and Secret w<i>-s<j> (opted in), and `unrelated` unlabelled Secrets
// per ReplicaSet exist beside them. Creation runs 32 at a time, unthrottled.
func (e *env) populate(b *testing.B, from, n, rsPer, unrelated int) []ctlWorkload {
	b.Helper()
	t0 := time.Now()
	out := make([]ctlWorkload, n)
	g, ctx := errgroup.WithContext(context.Background())
	g.SetLimit(32)
	optIn := map[string]string{"configmap-attacher/revisioned": "true"}
	for i := 0; i < n; i++ {
		i, w := i, from+i
		g.Go(func() error {
			name := fmt.Sprintf("w%d", w)
			rctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			ro, err := e.rollouts.ArgoprojV1alpha1().Rollouts(e.ns).Create(rctx, &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: v1alpha1.RolloutSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
					Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}}, Spec: ctlSpec(nil, nil)},
					Strategy: v1alpha1.RolloutStrategy{Canary: &v1alpha1.CanaryStrategy{}}}}, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("create Rollout %s: %w", name, err)
			}
			out[i].ro = ro
			for j := 0; j < rsPer; j++ {
				cm, sec := fmt.Sprintf("%s-c%d", name, j), fmt.Sprintf("%s-s%d", name, j)
				if _, err := e.admin.CoreV1().ConfigMaps(e.ns).Create(rctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cm, Labels: optIn},
					Data: map[string]string{"app.yaml": strings.Repeat("k: v\n", 40)}}, metav1.CreateOptions{}); err != nil {
					return err
				}
				if _, err := e.admin.CoreV1().Secrets(e.ns).Create(rctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: sec, Labels: optIn},
					Data: map[string][]byte{"token": []byte(strings.Repeat("s", 64))}}, metav1.CreateOptions{}); err != nil {
					return err
				}
				for u := 0; u < unrelated; u++ {
					if _, err := e.admin.CoreV1().Secrets(e.ns).Create(rctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-u%d-%d", name, j, u)},
						Data: map[string][]byte{"token": []byte(strings.Repeat("u", 64))}}, metav1.CreateOptions{}); err != nil {
						return err
					}
				}
				rs, err := e.createRS(rctx, ro, fmt.Sprintf("h%d", j), ctlSpec([]string{cm}, []string{sec}))
				if err != nil {
					return err
				}
				out[i].rss = append(out[i].rss, rs)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	b.Logf("populated %d workloads × %d ReplicaSets (+%d unrelated Secrets each) in %v", n, rsPer, unrelated, time.Since(t0).Round(time.Millisecond))
	return out
}

func (e *env) createRS(ctx context.Context, ro *v1alpha1.Rollout, hash string, spec corev1.PodSpec) (*appsv1.ReplicaSet, error) {
	zero := int32(0)
	l := map[string]string{"app": ro.Name, "rollouts-pod-template-hash": hash}
	rs, err := e.admin.AppsV1().ReplicaSets(e.ns).Create(ctx, &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: ro.Name + "-" + hash, Labels: l, Annotations: map[string]string{"rollout.argoproj.io/revision": "1"},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(ro, v1alpha1.SchemeGroupVersion.WithKind("Rollout"))}},
		Spec: appsv1.ReplicaSetSpec{Replicas: &zero, Selector: &metav1.LabelSelector{MatchLabels: l},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: l}, Spec: spec}},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create ReplicaSet %s-%s: %w", ro.Name, hash, err)
	}
	return rs, nil
}

// ctlProc is the controller process (a cluster.ControllerProcess), stopped by b.Cleanup.
type ctlProc struct{ *cluster.ControllerProcess }

func startCtl(b *testing.B, e *env, args ...string) *ctlProc {
	b.Helper()
	logPath := filepath.Join(e.c.Dir, fmt.Sprintf("controller-%d.log", time.Now().UnixNano()))
	cp, err := cluster.LaunchController(pluginBin, "bench", logPath, nil,
		append([]string{"-kubeconfig", e.c.KubeconfigPath, "-namespaces", e.ns, "-log-level", "warn"}, args...)...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cp.Stop)
	return &ctlProc{cp}
}

func (p *ctlProc) waitReady(b *testing.B) time.Duration {
	b.Helper()
	t0 := time.Now()
	for {
		if ok, _ := p.Ready(); ok {
			return time.Since(t0)
		}
		if !p.Running() {
			b.Fatalf("controller exited; log %s", p.LogPath)
		}
		if time.Since(t0) > 10*time.Minute {
			b.Fatal("controller not ready after 10m")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (p *ctlProc) scrape(b *testing.B) map[string]float64 {
	b.Helper()
	m, err := cluster.ScrapeMetrics(p.MetricsURL, 5*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// waitAdded waits until the controller reports n owner references added (or, in dry run, that
// it would add them) and returns the time since since.
func (p *ctlProc) waitAdded(b *testing.B, n int, since time.Time, metric string) time.Duration {
	b.Helper()
	for {
		m := p.scrape(b)
		if got := cluster.SumMetric(m, ctlPrefix+metric); got >= float64(n) {
			return time.Since(since)
		}
		if time.Since(since) > 30*time.Minute {
			b.Fatalf("%s not %d after 30m", metric, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func ctlRSS(b *testing.B, pid int, field string) float64 {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%d kB", &kb); err == nil {
				return float64(kb) / 1024
			}
		}
	}
	b.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

func percentile(ds []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	idx := int(math.Ceil(p*float64(len(s)))) - 1
	if idx < 0 {
		idx = 0
	}
	return s[idx]
}

// BenchmarkControllerReaction: with 100 and with 1,000 workloads in the cache (each with one
// owned ReplicaSet), the time from the create call of a new ReplicaSet returning until a
// watch sees its owner reference on the (already existing, opted-in) ConfigMap it uses.
// Goal on loopback: p50 ≤ 100 ms, p99 ≤ 1 s.
func BenchmarkControllerReaction(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("workloads=%d", n), func(b *testing.B) {
			e := newEnv(b)
			ws := e.populate(b, 0, n, 1, 0)
			p := startCtl(b, e, "-leader-elect=false")
			p.waitReady(b)
			p.waitAdded(b, 2*n, time.Now(), "owner_references_added_total")
			const samples = 200
			cms, err := e.admin.CoreV1().ConfigMaps(e.ns).List(context.Background(), metav1.ListOptions{Limit: 1})
			if err != nil {
				b.Fatal(err)
			}
			w, err := e.admin.CoreV1().ConfigMaps(e.ns).Watch(context.Background(), metav1.ListOptions{ResourceVersion: cms.ResourceVersion})
			if err != nil {
				b.Fatal(err)
			}
			defer w.Stop()
			owned := make(chan types.UID, 16)
			go func() {
				for ev := range w.ResultChan() {
					if cm, ok := ev.Object.(*corev1.ConfigMap); ok && ev.Type == watch.Modified {
						for _, r := range cm.OwnerReferences {
							owned <- r.UID
						}
					}
				}
			}()
			var lat []time.Duration
			b.ResetTimer()
			for i := 0; i < samples; i++ {
				wl := ws[i%n]
				cm := fmt.Sprintf("r%d", i)
				if _, err := e.admin.CoreV1().ConfigMaps(e.ns).Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cm,
					Labels: map[string]string{"configmap-attacher/revisioned": "true"}}}, metav1.CreateOptions{}); err != nil {
					b.Fatal(err)
				}
				rs, err := e.createRS(context.Background(), wl.ro, fmt.Sprintf("r%d", i), ctlSpec([]string{cm}, nil))
				if err != nil {
					b.Fatal(err)
				}
				t0 := time.Now()
				deadline := time.After(30 * time.Second)
			wait:
				for {
					select {
					case uid := <-owned:
						if uid == rs.UID {
							break wait
						}
					case <-deadline:
						b.Fatalf("ConfigMap %s not owned after 30s", cm)
					}
				}
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			p50, p99 := percentile(lat, 0.5), percentile(lat, 0.99)
			b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
			b.Logf("reaction with %d workloads: p50 %v, p99 %v, max %v over %d samples", n, p50, p99, percentile(lat, 1), samples)
			m := p.scrape(b)
			b.Logf("controller histogram: %v observations, sum %.3fs", cluster.SumMetric(m, ctlPrefix+"reaction_seconds_count"), cluster.SumMetric(m, ctlPrefix+"reaction_seconds_sum"))
		})
	}
}

// BenchmarkControllerColdStart: 1,000 workloads × 5 ReplicaSets × 2 objects exist before the
// controller starts; the time until every reference is in place (one patch per object) against
// what the client-side -qps allows. Then the requests per minute with nothing to do (leader
// election on: lease renewals only).
func BenchmarkControllerColdStart(b *testing.B) {
	const workloads, rsPer, qps, burst = 1000, 5, 200, 100
	e := newEnv(b)
	e.populate(b, 0, workloads, rsPer, 0)
	objects := workloads * rsPer * 2
	t0 := time.Now()
	p := startCtl(b, e, "-qps", strconv.Itoa(qps), "-burst", strconv.Itoa(burst), "-leader-election-namespace", e.ns,
		"-leader-election-lease-duration", "15s", "-leader-election-renew-deadline", "10s", "-leader-election-retry-period", "2s")
	ready := p.waitReady(b)
	took := p.waitAdded(b, objects, t0, "owner_references_added_total")
	m := p.scrape(b)
	patches := cluster.SumMetric(m, ctlPrefix+"api_requests_total", `verb="patch"`)
	allowed := time.Duration((patches - burst) / qps * float64(time.Second))
	b.ReportMetric(took.Seconds(), "cold-start-s")
	b.ReportMetric(took.Seconds()/allowed.Seconds(), "x-qps-bound")
	b.Logf("cold start: %d objects (%d ReplicaSets) owned %v after start (caches synced at %v); %v patches; -qps %d -burst %d allow %v: %.2f×",
		objects, workloads*rsPer, took.Round(time.Millisecond), ready.Round(time.Millisecond), patches, qps, burst, allowed.Round(time.Millisecond), took.Seconds()/allowed.Seconds())
	b.Logf("RSS after the cold start: %.1f MiB (peak %.1f MiB)", ctlRSS(b, p.PID(), "VmRSS"), ctlRSS(b, p.PID(), "VmHWM"))

	// Idle: nothing to do. Count the requests over one minute.
	time.Sleep(5 * time.Second)
	before := p.scrape(b)
	const idle = time.Minute
	time.Sleep(idle)
	after := p.scrape(b)
	var parts []string
	var total float64
	for k, v := range after {
		if strings.HasPrefix(k, ctlPrefix+"api_requests_total") && v-before[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %v", strings.TrimPrefix(k, ctlPrefix+"api_requests_total"), v-before[k]))
			total += v - before[k]
		}
	}
	sort.Strings(parts)
	b.ReportMetric(total, "idle-req/min")
	b.Logf("idle: %v requests in %v: %s", total, idle, strings.Join(parts, ", "))
}

// BenchmarkControllerMemory: the controller's RSS with 1k and with 10k ReplicaSets in its
// cache, each with 2 opted-in objects and as many unrelated Secrets (-dry-run: the caches are
// the same, without 20k patches). Goal: ≤ 100 MiB at 10k.
func BenchmarkControllerMemory(b *testing.B) {
	e := newEnv(b)
	const rsPer = 5
	have := 0
	for _, rsTotal := range []int{1000, 10000} {
		add := rsTotal/rsPer - have
		e.populate(b, have, add, rsPer, 2)
		have += add
		p := startCtl(b, e, "-leader-elect=false", "-dry-run")
		ready := p.waitReady(b)
		p.waitAdded(b, 2*rsTotal, time.Now(), "owner_references_would_add_total")
		time.Sleep(3 * time.Second)
		rss, hwm := ctlRSS(b, p.PID(), "VmRSS"), ctlRSS(b, p.PID(), "VmHWM")
		b.ReportMetric(rss, fmt.Sprintf("MiB-at-%d-rs", rsTotal))
		b.Logf("%d ReplicaSets, %d opted-in objects, %d unrelated Secrets: caches synced in %v, RSS %.1f MiB (peak %.1f MiB)",
			rsTotal, 2*rsTotal, 2*rsTotal, ready.Round(time.Millisecond), rss, hwm)
		p.Stop()
	}
}
