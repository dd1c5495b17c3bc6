// Package controller tests `configmap-attacher controller` on a real control plane (etcd,
// kube-apiserver, kube-controller-manager from test/cluster), with the real Argo Rollouts
// controller (test/cluster's RolloutsController) wherever Rollouts move, the
// kube-controller-manager's Deployment controller for Deployments, and test/cluster's FakeKubelet
// so that pods become Ready only when their ConfigMaps and Secrets exist. The controller runs
// as its own process (the built binary) with the RBAC of examples/controller.yaml.
package controller

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/configmap-attacher/configmap-attacher/test/cluster"
)

// env is the shared cluster with the Rollouts controller, the fake kubelet and one
// configmap-attacher controller (default selector, every namespace, no leader election).
type env struct {
	c          *cluster.Cluster
	rollouts   *cluster.RolloutsController
	kubelet    *cluster.FakeKubelet
	bin        string // the configmap-attacher binary
	kubeconfig string // the controller's ServiceAccount (examples/controller.yaml)
	ctl        *proc
}

var (
	shared    *env
	sharedErr error
)

func TestMain(m *testing.M) { os.Exit(runMain(m)) }

func runMain(m *testing.M) int {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		_ = flag.Set("test.parallel", "8") // the tests mostly wait on controllers
	}
	start := time.Now()
	dir, err := os.MkdirTemp("", "cma-controller-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin, err := cluster.BuildPlugin(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "controller tests:", err)
		return 1
	}
	c, err := cluster.StartShared(cluster.Options{})
	if err == nil {
		shared, err = startEnv(c, bin)
	}
	sharedErr = err
	if err != nil {
		fmt.Fprintln(os.Stderr, "controller tests: shared environment:", err)
	} else {
		fmt.Fprintf(os.Stderr, "controller tests: environment up in %v (controller log %s)\n", time.Since(start).Round(time.Millisecond), shared.ctl.logPath)
	}
	code := m.Run()
	if shared != nil {
		shared.ctl.stop()
		if err := shared.rollouts.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "controller tests: stopping the Rollouts controller:", err)
		}
		shared.kubelet.Stop()
	}
	c.Stop()
	return code
}

func startEnv(c *cluster.Cluster, bin string) (*env, error) {
	cs, err := kubernetes.NewForConfig(c.AdminConfig)
	if err != nil {
		return nil, err
	}
	e := &env{c: c, bin: bin, kubelet: cluster.StartFakeKubelet(cs)}
	e.rollouts, err = cluster.StartRolloutsController(c, cluster.RolloutsControllerOptions{Version: cluster.RolloutsVersion, PluginBinary: bin})
	if err != nil {
		e.kubelet.Stop()
		return nil, err
	}
	if e.kubeconfig, err = controllerIdentity(c, cs); err != nil {
		return nil, err
	}
	e.ctl, err = startController(c.Dir, bin, "shared", "-kubeconfig", e.kubeconfig, "-leader-elect=false", "-resync", "1m", "-log-level", "debug")
	if err != nil {
		return nil, err
	}
	return e, nil
}

// controllerIdentity applies the RBAC of examples/controller.yaml (everything but the
// Deployment, PodDisruptionBudget and Service) and writes a kubeconfig with the
// ServiceAccount's token.
func controllerIdentity(c *cluster.Cluster, cs kubernetes.Interface) (string, error) {
	b, err := os.ReadFile(filepath.Join(cluster.RepoRoot(), "examples", "controller.yaml"))
	if err != nil {
		return "", err
	}
	var keep []string
	for _, doc := range strings.Split(string(b), "\n---") {
		var m struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			return "", fmt.Errorf("examples/controller.yaml: %w", err)
		}
		switch m.Kind {
		case "", "Deployment", "Service", "PodDisruptionBudget":
		default:
			keep = append(keep, doc)
		}
	}
	f := filepath.Join(c.Dir, "controller-rbac.yaml")
	if err := os.WriteFile(f, []byte(strings.Join(keep, "\n---\n")), 0o644); err != nil {
		return "", err
	}
	if err := cluster.Kubectl(c, "apply", "-f", f); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	user := "system:serviceaccount:configmap-attacher:configmap-attacher-controller"
	for _, a := range []authorizationv1.ResourceAttributes{
		{Verb: "watch", Group: "apps", Resource: "replicasets"},
		{Verb: "patch", Resource: "secrets", Namespace: "default"},
		{Verb: "create", Resource: "events", Namespace: "default"},
		{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: "configmap-attacher"},
	} {
		if err := cluster.WaitForAccess(ctx, cs, user, a); err != nil {
			return "", err
		}
	}
	return cluster.ServiceAccountKubeconfig(ctx, c, cs, "configmap-attacher", "configmap-attacher-controller", c.Dir)
}

func sharedEnv(t *testing.T) *env {
	t.Helper()
	if sharedErr != nil {
		cluster.SkipOrFail(t, sharedErr)
	}
	if shared == nil {
		t.Fatal("no shared environment")
	}
	return shared
}

// proc is one controller process. Only its own PID is ever signalled.
type proc struct {
	name                string
	pid                 int
	logPath             string
	metricsURL, health  string
	done                chan struct{}
	err                 error
	mu                  sync.Mutex
	exitCode            int
	metricsPort, hlPort int
}

// startController starts `configmap-attacher controller` with metrics and health on free
// loopback ports and waits until /readyz answers 200 (caches synced).
func startController(dir, bin, name string, args ...string) (*proc, error) {
	p, err := launchController(dir, bin, name, args...)
	if err != nil {
		return nil, err
	}
	return p, p.waitReady(60 * time.Second)
}

func launchController(dir, bin, name string, args ...string) (*proc, error) {
	ports, err := cluster.FreePorts(2)
	if err != nil {
		return nil, err
	}
	p := &proc{name: name, logPath: filepath.Join(dir, "controller-"+name+".log"), done: make(chan struct{}),
		metricsPort: ports[0], hlPort: ports[1],
		metricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[0]), health: fmt.Sprintf("http://127.0.0.1:%d", ports[1])}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	full := append([]string{"controller", "-metrics-addr", fmt.Sprintf("127.0.0.1:%d", ports[0]), "-health-addr", fmt.Sprintf("127.0.0.1:%d", ports[1])}, args...)
	fmt.Fprintf(logf, "=== start %s %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(full, " "))
	started := make(chan error, 1)
	go func() {
		// The forking thread stays locked until the child exits, so Pdeathsig fires only
		// when the test binary dies.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer close(p.done)
		cmd := exec.Command(bin, full...)
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			logf.Close()
			started <- err
			return
		}
		logf.Close()
		p.pid = cmd.Process.Pid
		started <- nil
		p.err = cmd.Wait()
		p.mu.Lock()
		p.exitCode = cmd.ProcessState.ExitCode()
		p.mu.Unlock()
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start controller %s: %w", name, err)
	}
	return p, nil
}

func (p *proc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

func (p *proc) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	hc := &http.Client{Timeout: time.Second}
	for {
		resp, err := hc.Get(p.health + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if !p.running() {
			return fmt.Errorf("controller %s exited (%v):\n%s", p.name, p.err, p.logTail(30))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("controller %s not ready after %v:\n%s", p.name, timeout, p.logTail(30))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop sends SIGTERM and waits (SIGKILL after 10 s).
func (p *proc) stop() {
	if p == nil || !p.running() {
		return
	}
	_ = syscall.Kill(p.pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.kill()
	}
}

// kill sends SIGKILL and waits.
func (p *proc) kill() {
	if p.running() {
		_ = syscall.Kill(p.pid, syscall.SIGKILL)
		<-p.done
	}
}

func (p *proc) log() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

func (p *proc) logTail(n int) string {
	lines := strings.Split(strings.TrimRight(p.log(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return fmt.Sprintf("--- last %d lines of %s ---\n%s", len(lines), p.logPath, strings.Join(lines, "\n"))
}

// scrape reads /metrics as "name{labels}" → value (labels as the text format renders them).
func (p *proc) scrape() (map[string]float64, error) {
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Get(p.metricsURL)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, errors.New(resp.Status)
	}
	return parseMetrics(resp.Body)
}

func parseMetrics(r io.Reader) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: %w", line, err)
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

// metric returns one sample (0 when absent): metric(m, "x_total", `kind="ConfigMap"`).
func metric(m map[string]float64, name string, labels ...string) float64 {
	if len(labels) == 0 {
		return m[name]
	}
	return m[name+"{"+strings.Join(labels, ",")+"}"]
}

// sum adds every sample of a metric whose labels contain all the given label pairs.
func sum(m map[string]float64, name string, labels ...string) float64 {
	total := 0.0
	for k, v := range m {
		base, rest, _ := strings.Cut(k, "{")
		if base != name {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(rest, l)
		}
		if ok {
			total += v
		}
	}
	return total
}

const prefix = "configmap_attacher_controller_"
