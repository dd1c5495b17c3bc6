package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Controllers are the kube-controller-manager controllers a Cluster runs.
var Controllers = []string{
	"garbage-collector-controller", "replicaset-controller", "deployment-controller",
	"serviceaccount-controller", "serviceaccount-token-controller", "namespace-controller",
}

// Options tune a Cluster.
type Options struct {
	// ExtraAPIServerArgs are appended to the kube-apiserver command line, e.g.
	// "--enable-admission-plugins=OwnerReferencesPermissionEnforcement" or
	// "--max-requests-inflight=10". A later flag overrides an earlier one.
	ExtraAPIServerArgs []string
	// NoControllerManager skips kube-controller-manager: no garbage collection, and new
	// namespaces get no default ServiceAccount (Namespace then does not wait for one).
	NoControllerManager bool
	// ExtraControllers are kube-controller-manager controllers run beside Controllers, e.g.
	// "job-controller" for Jobs that complete (with FakeKubelet.RunImage).
	ExtraControllers []string
	// KubeVersion is the Kubernetes version of the cluster's binaries, one of KubeVersions
	// (OldKubeVersion for the oldest the project supports); empty: KubeVersion. The
	// harness's own flags follow it (see apiserverArgs); ExtraAPIServerArgs are passed as given.
	KubeVersion string
}

// kubeVersion is o.KubeVersion or the default.
func (o Options) kubeVersion() string {
	if o.KubeVersion == "" {
		return KubeVersion
	}
	return o.KubeVersion
}

// Cluster is a running control plane. Its fields are read-only.
type Cluster struct {
	// AdminConfig authenticates as system:masters (bypasses RBAC). Unthrottled (QPS -1).
	// Copy it (rest.CopyConfig) before changing it.
	AdminConfig *rest.Config
	// KubeconfigPath is an admin kubeconfig file for out-of-process tools (kubectl, a controller).
	KubeconfigPath string
	// Dir is the state directory: PKI, etcd data, <component>.log, pids, kubeconfigs.
	Dir string
	// BinDir holds etcd, kube-apiserver, kube-controller-manager and kubectl.
	BinDir string
	// KubeVersion is the Kubernetes version the cluster runs (Options.KubeVersion).
	KubeVersion string
	// Host is the apiserver URL, https://127.0.0.1:<port>.
	Host string
	// EtcdURL is the etcd client URL, http://127.0.0.1:<port>.
	EtcdURL string

	opts                 Options
	pki                  *pki
	etcd, apiserver, kcm *process
	stopOnce             sync.Once
}

// Start starts a cluster for one test and stops it with t.Cleanup (also when the test fails;
// the state directory is then kept and its path logged). It skips or fails the test when the
// binaries are unavailable (see BinDir) and fails it when the cluster does not come up.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	bin := BinDirFor(t, opts.kubeVersion())
	start := time.Now()
	c, err := start1(bin, opts)
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	t.Logf("cluster (Kubernetes %s) up in %v: %s (state %s)", c.KubeVersion, time.Since(start).Round(time.Millisecond), c.Host, c.Dir)
	t.Cleanup(func() {
		c.stop()
		if t.Failed() || os.Getenv("CMA_KEEP_CLUSTER_DIR") == "1" {
			t.Logf("cluster state and logs kept in %s", c.Dir)
			return
		}
		os.RemoveAll(c.Dir)
	})
	return c
}

// StartShared starts a cluster outside a test, typically in TestMain; the caller must call
// Stop. The error wraps ErrUnavailable when the binaries are missing and cannot be built; pass
// it to Require in each test so the test skips or fails accordingly.
func StartShared(opts Options) (*Cluster, error) {
	bin, err := FindBinDirFor(opts.kubeVersion())
	if err != nil {
		return nil, err
	}
	start := time.Now()
	c, err := start1(bin, opts)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "test/support/cluster: shared cluster up in %v: %s (state %s)\n", time.Since(start).Round(time.Millisecond), c.Host, c.Dir)
	return c, nil
}

// Require returns c, the result of StartShared, or ends the test because of err (skip when
// the binaries are unavailable and the cluster is not Required(), failure otherwise).
func Require(t testing.TB, c *Cluster, err error) *Cluster {
	t.Helper()
	if err != nil {
		SkipOrFail(t, err)
	}
	if c == nil {
		t.Fatal("no shared cluster (StartShared not called?)")
	}
	return c
}

// Stop stops the processes this cluster started (controller-manager, apiserver, etcd) and
// removes the state directory unless CMA_KEEP_CLUSTER_DIR=1. Safe on nil and to call twice.
func (c *Cluster) Stop() {
	if c == nil {
		return
	}
	c.stop()
	if os.Getenv("CMA_KEEP_CLUSTER_DIR") == "1" {
		fmt.Fprintf(os.Stderr, "test/support/cluster: state and logs kept in %s\n", c.Dir)
		return
	}
	os.RemoveAll(c.Dir)
}

// Grace periods between SIGTERM and SIGKILL. kube-apiserver's graceful shutdown waits up to
// --request-timeout (1 min) for open watches, so it is cut short; the state is disposable.
const (
	kcmGrace       = 3 * time.Second
	apiserverGrace = 3 * time.Second
	etcdGrace      = 5 * time.Second
)

func (c *Cluster) stop() {
	c.stopOnce.Do(func() {
		t0 := time.Now()
		c.kcm.stop(kcmGrace)
		t1 := time.Now()
		c.apiserver.stop(apiserverGrace)
		t2 := time.Now()
		c.etcd.stop(etcdGrace)
		if os.Getenv("CMA_CLUSTER_DEBUG") == "1" {
			fmt.Fprintf(os.Stderr, "test/support/cluster: stopped %s: kcm %v, apiserver %v, etcd %v\n", c.Dir,
				t1.Sub(t0).Round(time.Millisecond), t2.Sub(t1).Round(time.Millisecond), time.Since(t2).Round(time.Millisecond))
		}
	})
}

// PIDs returns the process IDs this cluster started, by component name (running or not).
func (c *Cluster) PIDs() map[string]int {
	m := map[string]int{"etcd": c.etcd.PID(), "kube-apiserver": c.apiserver.PID()}
	if c.kcm != nil {
		m["kube-controller-manager"] = c.kcm.PID()
	}
	return m
}

// LogPath returns the log file of a component ("etcd", "kube-apiserver", "kube-controller-manager").
func (c *Cluster) LogPath(component string) string {
	return filepath.Join(c.Dir, component+".log")
}

func start1(bin string, opts Options) (c *Cluster, err error) {
	dir, err := os.MkdirTemp("", "cma-cluster-")
	if err != nil {
		return nil, err
	}
	c = &Cluster{Dir: dir, BinDir: bin, KubeVersion: opts.kubeVersion(), opts: opts}
	defer func() {
		if err != nil {
			c.stop()
			err = fmt.Errorf("%w\n(state kept in %s)", err, dir)
		}
	}()
	if c.pki, err = newPKI(dir); err != nil {
		return c, fmt.Errorf("pki: %w", err)
	}
	// A port found free may be taken before the process binds it: retry with new ports.
	for attempt := 1; ; attempt++ {
		err = c.startEtcdAndAPIServer()
		if err == nil || attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			break
		}
		c.apiserver.stop(5 * time.Second)
		c.etcd.stop(5 * time.Second)
		os.RemoveAll(filepath.Join(dir, "etcd-data"))
	}
	if err != nil {
		return c, err
	}
	if err = c.writePIDs(); err != nil {
		return c, err
	}
	if !opts.NoControllerManager {
		if err = c.startControllerManager(); err != nil {
			return c, err
		}
		if err = c.writePIDs(); err != nil {
			return c, err
		}
	}
	return c, nil
}

func (c *Cluster) writePIDs() error {
	var b strings.Builder
	for _, p := range []*process{c.etcd, c.apiserver, c.kcm} {
		if p != nil && p.PID() != 0 {
			fmt.Fprintf(&b, "%s %d\n", p.name, p.PID())
		}
	}
	return os.WriteFile(filepath.Join(c.Dir, "pids"), []byte(b.String()), 0o644)
}

func (c *Cluster) newProcess(name string, args ...string) *process {
	return &process{name: name, bin: filepath.Join(c.BinDir, name), args: args, dir: c.Dir,
		logPath: filepath.Join(c.Dir, name+".log")}
}

// waitFor polls check until it returns true, the process exits, or timeout passes.
func waitFor(p *process, timeout time.Duration, what string, check func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		ok, err := check()
		if ok {
			return nil
		}
		last = err
		select {
		case <-p.exited():
			return fmt.Errorf("%s exited while waiting for %s: %v\n%s", p.name, what, p.err, p.logTail(40))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %s not reached within %v (last error: %v)\n%s", p.name, what, timeout, last, p.logTail(40))
		}
	}
}

func (c *Cluster) startEtcdAndAPIServer() error {
	ports, err := FreePorts(3)
	if err != nil {
		return err
	}
	c.EtcdURL = fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	c.etcd = c.newProcess("etcd",
		"--name", "cma",
		"--data-dir", filepath.Join(c.Dir, "etcd-data"),
		"--listen-client-urls", c.EtcdURL, "--advertise-client-urls", c.EtcdURL,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "cma="+peer, "--initial-cluster-state", "new",
		"--unsafe-no-fsync", "--log-level", "warn",
	)
	if err := c.etcd.start(); err != nil {
		return err
	}
	hc := &http.Client{Timeout: 2 * time.Second}
	if err := waitFor(c.etcd, 30*time.Second, "/health", func() (bool, error) {
		resp, err := hc.Get(c.EtcdURL + "/health")
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Errorf("status %s", resp.Status)
	}); err != nil {
		return err
	}

	c.Host = fmt.Sprintf("https://127.0.0.1:%d", ports[2])
	c.AdminConfig = &rest.Config{
		Host: c.Host, QPS: -1,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.pki.caCert, CertData: c.pki.adminCert, KeyData: c.pki.adminKey},
	}
	c.KubeconfigPath = filepath.Join(c.Dir, "admin.kubeconfig")
	if err := writeKubeconfig(c.KubeconfigPath, c.AdminConfig, "admin"); err != nil {
		return err
	}
	args, err := c.apiserverArgs(ports[2])
	if err != nil {
		return err
	}
	c.apiserver = c.newProcess("kube-apiserver", append(args, c.opts.ExtraAPIServerArgs...)...)
	return c.startAPIServer()
}

func (c *Cluster) startAPIServer() error {
	if err := c.apiserver.start(); err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(c.AdminConfig)
	if err != nil {
		return err
	}
	err = waitFor(c.apiserver, 90*time.Second, "/readyz", func() (bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil, err
	})
	if err != nil && strings.Contains(c.apiserver.logSinceLastStart(), "address already in use") {
		err = fmt.Errorf("%w (address already in use)", err)
	}
	return err
}

// StopAPIServer stops kube-apiserver (SIGTERM, SIGKILL after 3 s); etcd and the
// controller-manager keep running. StartAPIServer brings it back on the same port with the
// same certificates and data.
func (c *Cluster) StopAPIServer() error {
	if !c.apiserver.running() {
		return errors.New("kube-apiserver is not running")
	}
	c.apiserver.stop(apiserverGrace)
	return nil
}

// StartAPIServer restarts a kube-apiserver stopped by StopAPIServer and waits for /readyz.
func (c *Cluster) StartAPIServer() error {
	if c.apiserver.running() {
		return errors.New("kube-apiserver is already running")
	}
	var err error
	for attempt := 0; attempt < 3; attempt++ { // the old socket may linger for a moment
		if err = c.startAPIServer(); err == nil {
			return c.writePIDs()
		}
		c.apiserver.stop(5 * time.Second)
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
		time.Sleep(time.Second)
	}
	return err
}

func (c *Cluster) startControllerManager() error {
	args, err := c.controllerManagerArgs()
	if err != nil {
		return err
	}
	c.kcm = c.newProcess("kube-controller-manager", args...)
	if err := c.kcm.start(); err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(c.AdminConfig)
	if err != nil {
		return err
	}
	return waitFor(c.kcm, 60*time.Second, "ServiceAccount default/default", func() (bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, err
	})
}

// Client returns an admin clientset.
func (c *Cluster) Client(t testing.TB) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(c.AdminConfig)
	if err != nil {
		t.Fatalf("clientset: %v", err)
	}
	return cs
}

var nonDNS = regexp.MustCompile(`[^a-z0-9-]+`)

// Namespace creates a fresh namespace named after the test, waits for its default
// ServiceAccount (unless NoControllerManager), and deletes it in t.Cleanup.
func (c *Cluster) Namespace(t testing.TB) string {
	t.Helper()
	prefix := strings.Trim(nonDNS.ReplaceAllString(strings.ToLower(t.Name()), "-"), "-")
	if len(prefix) > 40 {
		prefix = strings.Trim(prefix[:40], "-")
	}
	cs := c.Client(t)
	ctx := context.Background()
	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(func() {
		err := cs.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) && c.apiserver.running() {
			t.Logf("delete namespace %s: %v", ns.Name, err)
		}
	})
	if c.kcm == nil {
		return ns.Name
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := cs.CoreV1().ServiceAccounts(ns.Name).Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			return ns.Name
		}
		if time.Now().After(deadline) {
			t.Fatalf("namespace %s: no default ServiceAccount after 30s: %v\n%s", ns.Name, err, c.kcm.logTail(20))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
