package cmd

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/configmap-attacher/configmap-attacher/plugin/controller"
	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
	"k8s.io/client-go/metadata"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
)

func testController(env map[string]string, crd bool) (*Controller, *cluster.SyncBuffer, *cluster.SyncBuffer) {
	var out, errb cluster.SyncBuffer
	return &Controller{Stdout: &out, Stderr: &errb,
		Getenv:   func(k string) string { return env[k] },
		readFile: func(string) ([]byte, error) { return nil, os.ErrNotExist },
		Clients: Clients{
			Controller: func(*rest.Config) (kubernetes.Interface, metadata.Interface, kubernetes.Interface, error) {
				k := fake.NewClientset()
				sch := metadatafake.NewTestScheme()
				_ = metav1.AddMetaToScheme(sch)
				return k, metadatafake.NewSimpleMetadataClient(sch, []runtime.Object{}...), k, nil
			},
			Served: func(*rest.Config) (controller.Served, error) {
				return controller.Served{Rollouts: crd, Experiments: crd}, nil
			},
		},
	}, &out, &errb
}

// executeController runs the controller command as Main does, under ctx and without tuning
// the test process.
func executeController(ctx context.Context, c *Controller, args []string) int {
	return execute(ctx, &controllerOptions{Controller: c}, args)
}

func kubeconfig(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "kubeconfig")
	err := os.WriteFile(p, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Every problem is reported at once, then the usage; exit 2.
func TestControllerFlagProblems(t *testing.T) {
	c, _, errb := testController(nil, true)
	code := executeController(context.Background(), c, []string{"-selector", "", "-workloads", "rollouts,replicasets", "-namespaces", "Shop,a,a",
		"-leader-election-lease-duration", "5s", "-leader-election-renew-deadline", "10s", "-workers", "0",
		"-metrics-addr", "8080", "-log-format", "xml", "extra"})
	if code != ExitUsage {
		t.Errorf("exit %d, want 2", code)
	}
	for _, want := range []string{
		`unexpected argument "extra"`,
		`-n/--namespace: "Shop" is not a valid namespace name`,
		`-n/--namespace: "a" is listed twice`,
		`-selector "": selects every object without a given label`,
		`-workloads "rollouts,replicasets": "replicasets" is not a workload kind`,
		`-leader-elect outside a cluster needs -leader-election-namespace`,
		`-leader-election-lease-duration (5s) must be greater than -leader-election-renew-deadline (10s)`,
		`-metrics-addr "8080"`,
		`-workers 0: must be at least 1`,
		`log format "xml"`,
		"Run configmap-attacher controller --help for usage.",
	} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errb.String())
		}
	}
	for _, sel := range []string{"", " ", "!", "!configmap-attacher/revisioned", "team!=a", "team notin (a)"} {
		c, _, errb := testController(nil, true)
		if code := executeController(context.Background(), c, []string{"-leader-elect=false", "-selector", sel}); code != ExitUsage {
			t.Errorf("-selector %q: exit %d, want 2: %s", sel, code, errb.String())
		}
	}
	c, _, _ = testController(nil, true)
	if code := executeController(context.Background(), c, []string{"-help"}); code != ExitOK {
		t.Errorf("-help: exit %d", code)
	}
}

// runFor runs the command until it reports ready, then stops it.
func runFor(t *testing.T, c *Controller, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- executeController(ctx, c, append([]string{"-kubeconfig", kubeconfig(t), "-metrics-addr", "127.0.0.1:0", "-health-addr", "127.0.0.1:0"}, args...))
	}()
	errb := c.Stderr.(*cluster.SyncBuffer)
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case code := <-done:
			return code, errb.String()
		default:
		}
		if strings.Contains(errb.String(), "full reconcile queued") || strings.Contains(errb.String(), "waiting for the lease") {
			cancel()
			return <-done, errb.String()
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("not started after 10s:\n%s", errb.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestControllerRolloutCRDMissing(t *testing.T) {
	c, _, _ := testController(nil, false)
	code, log := runFor(t, c, "-leader-elect=false")
	if code != ExitOK || !strings.Contains(log, "watching Deployments only") || !strings.Contains(log, `workloads="Deployments,StatefulSets,DaemonSets,Jobs,CronJobs,Pods"`) {
		t.Errorf("defaulted -workloads without the CRD: exit %d\n%s", code, log)
	}
	c, _, _ = testController(nil, false)
	code, log = runFor(t, c, "-leader-elect=false", "-workloads", "rollouts")
	if code != ExitFail || !strings.Contains(log, "-workloads names rollouts but the Rollout CRD (rollouts.argoproj.io) is not installed") {
		t.Errorf("explicit rollouts without the CRD: exit %d\n%s", code, log)
	}
	c, _, _ = testController(nil, true)
	code, log = runFor(t, c, "-leader-elect=false")
	if code != ExitOK || !strings.Contains(log, `workloads="Rollouts,Deployments,StatefulSets,DaemonSets,Jobs,CronJobs,Pods"`) {
		t.Errorf("with the CRD: exit %d\n%s", code, log)
	}
}

// In a pod the Lease goes to the pod's namespace (POD_NAMESPACE from the downward API, or the
// service account's namespace file).
func TestControllerLeaseNamespaceInCluster(t *testing.T) {
	c, _, _ := testController(map[string]string{"POD_NAMESPACE": "cma-system"}, true)
	code, log := runFor(t, c, "-leader-election-lease-duration", "2s", "-leader-election-renew-deadline", "1s", "-leader-election-retry-period", "200ms")
	if code != ExitOK || !strings.Contains(log, "lease=cma-system/configmap-attacher") {
		t.Errorf("exit %d\n%s", code, log)
	}
}

// A watched namespace whose list is forbidden (its Role missing) neither stops the controller
// nor makes it exit: /readyz answers 200 and names the namespace and the resources that did
// not sync, /metrics has its scope_synced series at 0, and SIGTERM still exits 0.
func TestControllerReadyzNamesUnsyncedNamespace(t *testing.T) {
	c, _, errb := testController(nil, false)
	c.Clients.Controller = func(*rest.Config) (kubernetes.Interface, metadata.Interface, kubernetes.Interface, error) {
		k := fake.NewClientset()
		sch := metadatafake.NewTestScheme()
		_ = metav1.AddMetaToScheme(sch)
		md := metadatafake.NewSimpleMetadataClient(sch)
		forbid := func(a k8stesting.Action) (bool, runtime.Object, error) {
			if a.GetNamespace() != "locked" {
				return false, nil, nil
			}
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: a.GetResource().Resource}, "", errors.New("no Role"))
		}
		k.PrependReactor("list", "*", forbid)
		md.PrependReactor("list", "*", forbid)
		return k, md, k, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- executeController(ctx, c, []string{"-kubeconfig", kubeconfig(t), "-metrics-addr", "127.0.0.1:0", "-health-addr", "127.0.0.1:0",
			"-leader-elect=false", "-workloads", "deployments", "-namespaces", "shop,locked"})
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(errb.String(), "full reconcile queued") {
		select {
		case code := <-done:
			t.Fatalf("exited %d:\n%s", code, errb.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("not serving after 10s:\n%s", errb.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	addr := func(name string) string {
		m := regexp.MustCompile(name + `="?([0-9.]+:[0-9]+)`).FindStringSubmatch(errb.String())
		if m == nil {
			t.Fatalf("no %s address in the log:\n%s", name, errb.String())
		}
		return m[1]
	}
	get := func(url string) (int, string) {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := get("http://" + addr("health") + "/readyz")
	if code != http.StatusOK || !strings.HasPrefix(body, "ok: serving 1 of 2 namespaces") ||
		!strings.Contains(body, "not synced: namespace locked: replicasets, configmaps, controllerrevisions, cronjobs, daemonsets, deployments, jobs, pods, secrets, statefulsets; is list and watch allowed? examples/controller-namespaced.yaml") {
		t.Errorf("/readyz %d:\n%s", code, body)
	}
	_, metrics := get("http://" + addr("metrics") + "/metrics")
	for _, want := range []string{`configmap_attacher_controller_scope_synced{namespace="locked"} 0`, `configmap_attacher_controller_scope_synced{namespace="shop"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	cancel()
	if code := <-done; code != ExitOK {
		t.Errorf("exit %d after shutdown:\n%s", code, errb.String())
	}
}
