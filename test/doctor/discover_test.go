package doctor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// TestDoctorFindsInstalls: two chart installs, as a split-by-namespace topology has them (one
// release per set of watched namespaces), each under a release name and in a namespace other
// than the defaults, their controllers run by the fake kubelet. `doctor -mode controller` with
// no other flag finds and checks both: each Deployment, its ServiceAccount's RBAC in its own
// watched namespace, its Lease (the name its -leader-election-id gives) and its metrics Service
// (found; not fetched, doctor runs outside the cluster). -instance narrows it to one release.
func TestDoctorFindsInstalls(t *testing.T) {
	c := cluster.Require(t, shared, sharedErr)
	cs := c.Client(t)
	bin, err := cluster.PluginBinary()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	logs := filepath.Join(c.Dir, "discover-pods")
	kubelet := cluster.StartFakeKubelet(cs)
	t.Cleanup(kubelet.Stop)
	kubelet.RunImage(image, cluster.PodRunner{Binary: bin, LogDir: logs, Timeout: 4 * time.Minute,
		Kubeconfig: func(ctx context.Context, ns, sa string) (string, error) {
			return cluster.ServiceAccountKubeconfig(ctx, c, cs, ns, sa, t.TempDir())
		}})

	type install struct{ release, ns, app, full string }
	var installs []install
	for _, release := range []string{"edge", "team-b"} {
		in := install{release: release, ns: c.Namespace(t), app: c.Namespace(t), full: release + "-configmap-attacher"}
		app(t, cs, in.app)
		ports, err := cluster.FreePorts(2)
		if err != nil {
			t.Fatal(err)
		}
		values := filepath.Join(t.TempDir(), "values.yaml")
		if err := os.WriteFile(values, []byte(fmt.Sprintf(`replicas: 1
logFormat: json
namespaces: [%s]
rbac: {scope: namespaces}
metrics: {bindAddress: 127.0.0.1, port: %d}
health: {bindAddress: 127.0.0.1, port: %d}
`, in.app, ports[0], ports[1])), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := helm(t, c, "install", release, filepath.Join(cluster.RepoRoot(), "charts", "configmap-attacher"), "-n", in.ns, "-f", values); err != nil {
			t.Fatal(err)
		}
		// --no-hooks: the uninstall cleanup hook's Job is no part of this test (with it, helm
		// waited its 5-minute timeout for each release).
		t.Cleanup(func() {
			if _, err := helm(t, c, "uninstall", release, "-n", in.ns, "--no-hooks"); err != nil {
				t.Error(err)
			}
		})
		installs = append(installs, in)
	}
	for _, in := range installs {
		cluster.WaitUntil(t, ctx, 100*time.Millisecond, "the Lease of "+in.release+" held", func() (bool, string) {
			l, err := cs.CoordinationV1().Leases(in.ns).Get(ctx, in.full, metav1.GetOptions{})
			if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
				return false, fmt.Sprintf("%v; pod runs %+v", err, kubelet.Runs(in.ns))
			}
			return true, ""
		})
	}

	var wants []string
	for _, in := range installs {
		wants = append(wants,
			fmt.Sprintf("OK      controller/install     Deployment %s/%s: instance %q: ServiceAccount %s, Lease %s/%s, watches %s, metrics Service %s-metrics:8080",
				in.ns, in.full, in.release, in.full, in.ns, in.full, in.app, in.full),
			fmt.Sprintf("OK      rbac/controller        system:serviceaccount:%s:%s: may do all", in.ns, in.full),
			fmt.Sprintf("OK      controller/lease       Lease %s/%s: held by", in.ns, in.full),
			fmt.Sprintf("WARNING controller/metrics     Service %s/%s-metrics: found, not fetched", in.ns, in.full))
	}
	out := expect(t, bin, c.KubeconfigPath, 0, []string{"-mode", "controller"}, append(wants, "0 error(s), 2 warning(s)")...)
	t.Logf("no flags:\n%s", out)

	out = expect(t, bin, c.KubeconfigPath, 0, []string{"-mode", "controller", "-instance", "edge"}, wants[:4]...)
	if strings.Contains(out, installs[1].ns) {
		t.Errorf("-instance edge reported the other release:\n%s", out)
	}
	// Planted: the second release's controller gone (its Deployment scaled to 0): its Lease is
	// reported, the first one still passes. The fake kubelet stops the pod with SIGKILL, so the
	// Lease stays held, and valid, until it expires (leaseDuration after its last renewal):
	// doctor is asked only once the apiserver's Lease says no replica leads.
	if err := cluster.Kubectl(c, "-n", installs[1].ns, "scale", "deployment", installs[1].full, "--replicas=0"); err != nil {
		t.Fatal(err)
	}
	waitLeaseLapsed(t, ctx, cs, kubelet, installs[1].ns, installs[1].full)
	out = expect(t, bin, c.KubeconfigPath, 1, []string{"-mode", "controller"}, "1 error(s)",
		fmt.Sprintf("ERROR   controller/lease       Lease %s/%s: ", installs[1].ns, installs[1].full), "no replica is leading", wants[2])
	t.Logf("second controller stopped:\n%s", firstErrors(out))
}

// waitLeaseLapsed waits until no run of the fake kubelet in ns is alive and Lease ns/name,
// read from the apiserver, stands for no leader: no holder, or renewTime + leaseDurationSeconds
// in the past (doctor's own test, by the same clock).
func waitLeaseLapsed(t *testing.T, ctx context.Context, cs kubernetes.Interface, k *cluster.FakeKubelet, ns, name string) {
	t.Helper()
	start := time.Now()
	cluster.WaitUntil(t, ctx, 200*time.Millisecond, "Lease "+ns+"/"+name+" released or expired", func() (bool, string) {
		for _, r := range k.Runs(ns) {
			if r.Finished.IsZero() {
				return false, "pod " + r.Pod + " still runs"
			}
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		l, err := cs.CoordinationV1().Leases(ns).Get(cctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" || l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
			return true, ""
		}
		expires := l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second)
		return time.Now().After(expires), fmt.Sprintf("held by %s until %s", *l.Spec.HolderIdentity, expires.UTC().Format(time.RFC3339Nano))
	})
	t.Logf("Lease %s/%s lapsed %v after the scale-down", ns, name, time.Since(start).Round(time.Millisecond))
}
