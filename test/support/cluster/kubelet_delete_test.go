package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestFakeKubeletStopsADeletedPodsRun: a pod whose image the fake kubelet runs (here
// /bin/sleep 600) is deleted, once gracefully (the kubelet sees its deletionTimestamp) and once
// at once (grace period 0: the object is gone without a deletionTimestamp ever being seen, as
// for a pod the apiserver deems unscheduled or finished). Each time its process must stop
// within seconds, as a container would, not at the runner's Timeout: a controller pod scaled
// away must stop renewing its Lease.
func TestFakeKubeletStopsADeletedPodsRun(t *testing.T) {
	c := Require(t, shared, sharedErr)
	cs := c.Client(t)
	ns := c.Namespace(t)
	k := StartFakeKubelet(cs)
	t.Cleanup(k.Stop)
	k.RunImage("example.invalid/sleeper", PodRunner{Binary: "/bin/sleep", LogDir: t.TempDir(), Timeout: 5 * time.Minute,
		Kubeconfig: func(context.Context, string, string) (string, error) { return c.KubeconfigPath, nil }})
	// Whether the kubelet's worker sees the deletionTimestamp before the object is gone is a
	// race (the apiserver deletes a pod with no node right after marking it): several pods
	// each way, so that a kubelet relying on the mark fails here reliably.
	for i := 0; i < 8; i++ {
		grace := []*int64{nil, new(int64)}[i%2]
		stopRun(t, c, k, ns, fmt.Sprintf("sleeper-%d", i), grace)
	}
}

// stopRun creates pod name, waits for its run, deletes it with grace and waits for the run to
// end.
func stopRun(t *testing.T, c *Cluster, k *FakeKubelet, ns, name string, grace *int64) {
	t.Helper()
	cs := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/sleeper:1", Args: []string{"600"}}}}}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	run := func() (PodRun, bool) {
		for _, r := range k.Runs(ns) {
			if r.Pod == name {
				return r, true
			}
		}
		return PodRun{}, false
	}
	WaitUntil(t, ctx, 100*time.Millisecond, "the run of pod "+name+" started", func() (bool, string) {
		_, ok := run()
		return ok, "no run yet"
	})
	if err := cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: grace}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	stopCtx, stopCancel := context.WithTimeout(ctx, 10*time.Second)
	defer stopCancel()
	WaitUntil(t, stopCtx, 100*time.Millisecond, "the run of deleted pod "+name+" stopped", func() (bool, string) {
		r, _ := run()
		return !r.Finished.IsZero(), "still running"
	})
	r, _ := run()
	t.Logf("pod %s (grace period %s): its run stopped %v after the delete (exit %d)", name, fmtGrace(grace), time.Since(start).Round(time.Millisecond), r.ExitCode)
}

func fmtGrace(g *int64) string {
	if g == nil {
		return "default"
	}
	return fmt.Sprint(*g)
}
