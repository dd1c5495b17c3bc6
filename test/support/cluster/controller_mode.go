package cluster

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

// The namespace and ServiceAccount of the controller mode (`configmap-attacher controller`)
// in examples/controller.yaml.
const (
	ControllerModeNamespace      = "configmap-attacher"
	ControllerModeServiceAccount = "configmap-attacher"
)

// ControllerModeIdentity applies the RBAC of examples/controller.yaml (everything but the
// Deployment, PodDisruptionBudget and Service), waits until the authorizer grants it, and
// writes a kubeconfig with the ServiceAccount's token into c.Dir: the identity test/controllermode,
// test/soak and hack/demo run the controller mode with, as a cluster would.
func ControllerModeIdentity(ctx context.Context, c *Cluster, cs kubernetes.Interface) (string, error) {
	b, err := os.ReadFile(filepath.Join(RepoRoot(), "examples", "controller.yaml"))
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
	if err := Kubectl(c, "apply", "-f", f); err != nil {
		return "", err
	}
	user := "system:serviceaccount:" + ControllerModeNamespace + ":" + ControllerModeServiceAccount
	for _, a := range []authorizationv1.ResourceAttributes{
		{Verb: "watch", Group: "apps", Resource: "replicasets"},
		{Verb: "patch", Resource: "configmaps", Namespace: "default"},
		{Verb: "patch", Resource: "secrets", Namespace: "default"},
		{Verb: "create", Resource: "events", Namespace: "default"},
		{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: ControllerModeNamespace},
	} {
		if err := WaitForAccess(ctx, cs, user, a); err != nil {
			return "", err
		}
	}
	return ServiceAccountKubeconfig(ctx, c, cs, ControllerModeNamespace, ControllerModeServiceAccount, c.Dir)
}

// ControllerProcess is one `configmap-attacher controller` process with metrics and health
// on free loopback ports, its output appended to LogPath (each start preceded by a
// "=== start" line). Only its own PID is ever signalled; it gets SIGKILL when the test binary
// dies. test/controllermode, test/soak and hack/demo start the controller mode with it.
type ControllerProcess struct {
	Name    string
	LogPath string
	// MetricsURL is http://127.0.0.1:<port>/metrics; HealthURL is http://127.0.0.1:<port>
	// (/readyz, /healthz).
	MetricsURL, HealthURL   string
	MetricsPort, HealthPort int

	p *process
}

// LaunchController starts `bin controller -metrics-addr … -health-addr … args...` with env
// added to the environment and returns without waiting (see WaitReady).
func LaunchController(bin, name, logPath string, env []string, args ...string) (*ControllerProcess, error) {
	ports, err := FreePorts(2)
	if err != nil {
		return nil, err
	}
	cp := &ControllerProcess{Name: name, LogPath: logPath, MetricsPort: ports[0], HealthPort: ports[1],
		MetricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[0]), HealthURL: fmt.Sprintf("http://127.0.0.1:%d", ports[1])}
	full := append([]string{"controller", "-metrics-addr", fmt.Sprintf("127.0.0.1:%d", ports[0]), "-health-addr", fmt.Sprintf("127.0.0.1:%d", ports[1])}, args...)
	cp.p = &process{name: "controller " + name, bin: bin, logPath: logPath, args: full, env: env}
	if err := cp.p.start(); err != nil {
		return nil, err
	}
	return cp, nil
}

// StartController is LaunchController, then WaitReady(timeout). The process is returned also
// with a readiness error (it may still be running: Stop it).
func StartController(bin, name, logPath string, timeout time.Duration, env []string, args ...string) (*ControllerProcess, error) {
	cp, err := LaunchController(bin, name, logPath, env, args...)
	if err != nil {
		return nil, err
	}
	return cp, cp.WaitReady(timeout)
}

// Ready reports whether /readyz answers 200 (the caches are synced), with what it answered.
func (cp *ControllerProcess) Ready() (bool, string) {
	resp, err := (&http.Client{Timeout: time.Second}).Get(cp.HealthURL + "/readyz")
	if err != nil {
		return false, err.Error()
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK, resp.Status
}

// WaitReady waits until Ready, failing when the process exits or after timeout.
func (cp *ControllerProcess) WaitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if ok, _ := cp.Ready(); ok {
			return nil
		}
		if !cp.Running() {
			_, err := cp.p.result()
			return fmt.Errorf("controller %s exited (%v):\n%s", cp.Name, err, cp.LogTail(30))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("controller %s not ready after %v:\n%s", cp.Name, timeout, cp.LogTail(30))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Running reports whether the process is alive.
func (cp *ControllerProcess) Running() bool { return cp.p.running() }

// Exited is closed once the process has exited.
func (cp *ControllerProcess) Exited() <-chan struct{} { return cp.p.exited() }

// ExitCode is the exit code (-1 after a signal); valid once Exited is closed.
func (cp *ControllerProcess) ExitCode() int { code, _ := cp.p.result(); return code }

// PID is the process ID.
func (cp *ControllerProcess) PID() int { return cp.p.PID() }

// Stop sends SIGTERM and waits, SIGKILL after 10 s. Safe on nil and when exited.
func (cp *ControllerProcess) Stop() {
	if cp != nil {
		cp.p.stop(10 * time.Second)
	}
}

// Kill sends SIGKILL and waits.
func (cp *ControllerProcess) Kill() {
	if cp.Running() {
		_ = syscall.Kill(cp.PID(), syscall.SIGKILL)
		<-cp.Exited()
	}
}

// Log returns the whole log.
func (cp *ControllerProcess) Log() string {
	b, _ := os.ReadFile(cp.LogPath)
	return string(b)
}

// LogTail returns the last n lines of the log.
func (cp *ControllerProcess) LogTail(n int) string { return cp.p.logTail(n) }

// Scrape reads /metrics (ParseMetrics).
func (cp *ControllerProcess) Scrape() (map[string]float64, error) {
	return ScrapeMetrics(cp.MetricsURL, 2*time.Second)
}
