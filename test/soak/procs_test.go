package soak

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/configmap-attacher/configmap-attacher/test/cluster"
)

// Leader election of the controller mode: short, so that a SIGKILLed leader is replaced
// within seconds (lease > renew > 1.2 × retry).
const (
	leaseDuration = 4 * time.Second
	renewDeadline = 3 * time.Second
	retryPeriod   = time.Second
)

// controllerIdentity applies the RBAC of examples/controller.yaml (everything but the
// Deployment, PodDisruptionBudget and Service) and writes a kubeconfig with the
// ServiceAccount's token (as test/controller does).
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
		{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: "configmap-attacher"},
	} {
		if err := cluster.WaitForAccess(ctx, cs, user, a); err != nil {
			return "", err
		}
	}
	return cluster.ServiceAccountKubeconfig(ctx, c, cs, "configmap-attacher", "configmap-attacher-controller", c.Dir)
}

// ctlProc is one `configmap-attacher controller` process. Only its own PID is signalled.
type ctlProc struct {
	name, logPath, metricsURL string
	pid                       int
	done                      chan struct{}
	exitCode                  int
}

func (p *ctlProc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// replica is one of the controller mode's replicas: a supervisor restarts its process when
// it exits (a leader that cannot renew exits 1; SIGKILL), as the kubelet restarts a pod.
type replica struct {
	name    string
	dir     string
	bin     string
	args    []string
	logPath string

	mu       sync.Mutex
	proc     *ctlProc
	starts   int
	exits    []int // exit codes seen (-1: signal)
	stopping bool
}

func (r *replica) launch() error {
	ports, err := cluster.FreePorts(2)
	if err != nil {
		return err
	}
	p := &ctlProc{name: r.name, logPath: r.logPath, done: make(chan struct{}),
		metricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[0])}
	logf, err := os.OpenFile(r.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	full := append([]string{"controller", "-metrics-addr", fmt.Sprintf("127.0.0.1:%d", ports[0]),
		"-health-addr", fmt.Sprintf("127.0.0.1:%d", ports[1])}, r.args...)
	fmt.Fprintf(logf, "=== start %s %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(full, " "))
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // Pdeathsig fires only when the test binary dies
		defer runtime.UnlockOSThread()
		defer close(p.done)
		cmd := exec.Command(r.bin, full...)
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
		_ = cmd.Wait()
		p.exitCode = cmd.ProcessState.ExitCode()
	}()
	if err := <-started; err != nil {
		return err
	}
	r.mu.Lock()
	r.proc = p
	r.starts++
	r.mu.Unlock()
	return nil
}

// supervise restarts the process 1 s after it exits, until stop.
func (r *replica) supervise(stop <-chan struct{}) {
	for {
		r.mu.Lock()
		p := r.proc
		r.mu.Unlock()
		select {
		case <-stop:
			return
		case <-p.done:
		}
		r.mu.Lock()
		r.exits = append(r.exits, p.exitCode)
		stopping := r.stopping
		r.mu.Unlock()
		if stopping {
			return
		}
		select {
		case <-stop:
			return
		case <-time.After(time.Second):
		}
		for r.launch() != nil {
			select {
			case <-stop:
				return
			case <-time.After(time.Second):
			}
		}
	}
}

func (r *replica) current() *ctlProc {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.proc
}

// kill sends SIGKILL to the running process (the supervisor restarts it).
func (r *replica) kill() {
	if p := r.current(); p != nil && p.running() {
		_ = syscall.Kill(p.pid, syscall.SIGKILL)
		<-p.done
	}
}

// shutdown stops the process for good (SIGTERM, SIGKILL after 10 s).
func (r *replica) shutdown() {
	r.mu.Lock()
	r.stopping = true
	p := r.proc
	r.mu.Unlock()
	if p == nil || !p.running() {
		return
	}
	_ = syscall.Kill(p.pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(p.pid, syscall.SIGKILL)
		<-p.done
	}
}

// scrape reads /metrics of the running process as "name{labels}" → value.
func (r *replica) scrape() (map[string]float64, error) {
	p := r.current()
	if p == nil || !p.running() {
		return nil, fmt.Errorf("%s not running", r.name)
	}
	resp, err := (&http.Client{Timeout: time.Second}).Get(p.metricsURL)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", p.metricsURL, resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
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
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out, sc.Err()
}

const metricPrefix = "configmap_attacher_controller_"

// perNamespace returns a gauge's samples by their namespace label.
func perNamespace(m map[string]float64, name string) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		base, rest, _ := strings.Cut(k, "{")
		if base != metricPrefix+name {
			continue
		}
		_, after, ok := strings.Cut(rest, `namespace="`)
		if !ok {
			continue
		}
		ns, _, _ := strings.Cut(after, `"`)
		out[ns] += v
	}
	return out
}
