package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	"sigs.k8s.io/yaml"

	"github.com/configmap-attacher/configmap-attacher/test/cluster"
)

// controllerNamespace and controllerSA are examples/controller.yaml's.
const (
	controllerNamespace = "configmap-attacher"
	controllerSA        = "configmap-attacher-controller"
)

// controllerMode is `configmap-attacher controller` running on the host, as
// examples/controller.yaml runs it in a cluster (its ServiceAccount and RBAC).
type controllerMode struct {
	cmd     *exec.Cmd
	logPath string
	health  string
}

// startControllerMode applies examples/controller.yaml without its Deployment, and starts the
// binary with that ServiceAccount's token, listening on 127.0.0.1 only; it returns once
// /readyz answers (the caches are synced).
func (d *demo) startControllerMode() (*controllerMode, error) {
	b, err := os.ReadFile(filepath.Join(cluster.RepoRoot(), "examples", "controller.yaml"))
	if err != nil {
		return nil, err
	}
	var keep []string
	for _, doc := range strings.Split(string(b), "\n---") {
		var m struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			return nil, fmt.Errorf("examples/controller.yaml: %w", err)
		}
		if m.Kind != "" && m.Kind != "Deployment" && m.Kind != "Service" {
			keep = append(keep, doc)
		}
	}
	path := filepath.Join(d.c.Dir, "controller-rbac.yaml")
	if err := os.WriteFile(path, []byte(strings.Join(keep, "\n---\n")), 0o644); err != nil {
		return nil, err
	}
	if err := cluster.Kubectl(d.c, "apply", "--server-side", "-f", path); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(d.ctx, 30*time.Second)
	defer cancel()
	user := "system:serviceaccount:" + controllerNamespace + ":" + controllerSA
	for _, a := range []authorizationv1.ResourceAttributes{
		{Verb: "watch", Group: "apps", Resource: "replicasets"},
		{Verb: "patch", Resource: "configmaps", Namespace: namespace},
	} {
		if err := cluster.WaitForAccess(ctx, d.kube, user, a); err != nil {
			return nil, err
		}
	}
	kc, err := cluster.ServiceAccountKubeconfig(ctx, d.c, d.kube, controllerNamespace, controllerSA, d.c.Dir)
	if err != nil {
		return nil, err
	}
	ports, err := cluster.FreePorts(2)
	if err != nil {
		return nil, err
	}
	m := &controllerMode{logPath: filepath.Join(d.c.Dir, "controller-mode.log"), health: fmt.Sprintf("127.0.0.1:%d", ports[1])}
	logf, err := os.Create(m.logPath)
	if err != nil {
		return nil, err
	}
	// One replica here: no leader election (the Lease needs the pod's namespace).
	m.cmd = exec.Command(d.plugin, "controller", "-kubeconfig", kc, "-leader-elect=false",
		"-metrics-addr", fmt.Sprintf("127.0.0.1:%d", ports[0]), "-health-addr", m.health)
	m.cmd.Stdout, m.cmd.Stderr = logf, logf
	m.cmd.Env = append(os.Environ(), "KUBECONFIG=/nonexistent")
	if err := m.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s controller: %w", d.plugin, err)
	}
	logf.Close()
	err = d.waitFor(30*time.Second, "the controller mode to report ready", func() (bool, string, error) {
		resp, err := http.Get("http://" + m.health + "/readyz")
		if err != nil {
			return false, err.Error(), nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status, nil
	})
	if err != nil {
		m.stop()
		return nil, fmt.Errorf("%w (log: %s)", err, m.logPath)
	}
	return m, nil
}

// stop ends the process (SIGTERM, then SIGKILL) and returns its PID.
func (m *controllerMode) stop() int {
	if m == nil || m.cmd == nil || m.cmd.Process == nil {
		return 0
	}
	pid := m.cmd.Process.Pid
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = m.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = m.cmd.Process.Kill()
		<-done
	}
	return pid
}
