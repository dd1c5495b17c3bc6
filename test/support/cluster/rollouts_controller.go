package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

// RolloutsControllerOptions configure StartRolloutsController.
type RolloutsControllerOptions struct {
	// Version of the controller (RolloutsVersion or RolloutsOldVersion): its binary, CRDs and
	// ClusterRole are used.
	Version string
	// PluginBinary is the absolute path of the built plugin, registered as file://.
	PluginBinary string
	// PluginArgs follow "--kubeconfig <plugin kubeconfig>" in stepPlugins[].args.
	PluginArgs []string
}

// RolloutsController is an Argo Rollouts controller process run against a Cluster with the
// plugin registered: the test packages (e2e, controller, soak, chart, image) and hack/demo
// all need the real controller, so it lives here with the control plane. It runs as admin;
// the plugin runs with the kubeconfig of ServiceAccount argo-rollouts/argo-rollouts, bound to
// the controller's own ClusterRole (from the argo-rollouts module) plus
// examples/rbac-step-plugin.yaml, as in a real installation.
type RolloutsController struct {
	Version string
	// Dir is the controller's working directory: the controller copies file:// plugins into
	// Dir/plugin-bin/.
	Dir string
	// LogPath is the controller's log (stdout and stderr, appended across restarts, each start
	// preceded by a "=== start" line). Plugin lines appear as plugin.configmap-attacher lines.
	LogPath string
	// PluginKubeconfig is the plugin's (non-admin) kubeconfig.
	PluginKubeconfig string

	c           *Cluster
	healthzPort int

	mu   sync.Mutex
	proc *process
	pids []int // every controller PID started, in order
}

// StartRolloutsController installs the version's CRDs, the plugin's identity and RBAC, and
// argo-rollouts-config, then starts the controller and waits until its rollout workers run.
// Call Stop when done.
func StartRolloutsController(c *Cluster, opts RolloutsControllerOptions) (*RolloutsController, error) {
	rdir, err := RolloutsDir(opts.Version)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(c.Dir, "rollouts-controller-")
	if err != nil {
		return nil, err
	}
	ctl := &RolloutsController{Version: opts.Version, Dir: dir, LogPath: filepath.Join(dir, "rollouts-controller.log"), c: c}
	if err := InstallCRDs(c, filepath.Join(rdir, "crds")); err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(c.AdminConfig)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ControllerNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create namespace %s: %w", ControllerNamespace, err)
	}
	if ctl.PluginKubeconfig, err = ctl.pluginIdentity(ctx, cs, opts.Version); err != nil {
		return nil, err
	}
	args := append([]string{"--kubeconfig", ctl.PluginKubeconfig}, opts.PluginArgs...)
	registration, err := yaml.Marshal([]map[string]any{{"name": PluginName, "location": "file://" + opts.PluginBinary, "args": args}})
	if err != nil {
		return nil, err
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "argo-rollouts-config", Namespace: ControllerNamespace},
		Data: map[string]string{"stepPlugins": string(registration)}}
	if _, err := cs.CoreV1().ConfigMaps(ControllerNamespace).Create(ctx, cm, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		_, err = cs.CoreV1().ConfigMaps(ControllerNamespace).Update(ctx, cm, metav1.UpdateOptions{})
		if err != nil {
			return nil, fmt.Errorf("update argo-rollouts-config: %w", err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("create argo-rollouts-config: %w", err)
	}
	ports, err := FreePorts(2)
	if err != nil {
		return nil, err
	}
	ctl.healthzPort = ports[1]
	ctl.proc = &process{name: "rollouts-controller", bin: filepath.Join(rdir, "rollouts-controller"), logPath: ctl.LogPath, dir: dir,
		args: []string{"--kubeconfig", c.KubeconfigPath, "--leader-elect=false",
			"--metricsPort", strconv.Itoa(ports[0]), "--healthzPort", strconv.Itoa(ports[1]), "--loglevel", "info"},
		env: []string{"POD_NAMESPACE=" + ControllerNamespace}}
	if err := ctl.Start(); err != nil {
		_ = ctl.Stop() // the start error is the one to report
		return nil, err
	}
	return ctl, nil
}

// pluginIdentity creates ServiceAccount argo-rollouts/argo-rollouts with the controller's
// ClusterRole and examples/rbac-step-plugin.yaml, and writes a kubeconfig with its token.
func (ctl *RolloutsController) pluginIdentity(ctx context.Context, cs kubernetes.Interface, version string) (string, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "argo-rollouts", Namespace: ControllerNamespace}}
	if _, err := cs.CoreV1().ServiceAccounts(ControllerNamespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("create ServiceAccount argo-rollouts: %w", err)
	}
	mod, err := RolloutsModuleDirAt(version)
	if err != nil {
		return "", err
	}
	binding := filepath.Join(ctl.Dir, "argo-rollouts-clusterrolebinding.yaml")
	if err := os.WriteFile(binding, []byte(RolloutsControllerBinding), 0o644); err != nil {
		return "", err
	}
	for _, f := range []string{
		filepath.Join(mod, "manifests", "role", "argo-rollouts-clusterrole.yaml"),
		binding,
		filepath.Join(RepoRoot(), "examples", "rbac-step-plugin.yaml"),
	} {
		if err := Kubectl(ctl.c, "apply", "--server-side", "-f", f); err != nil {
			return "", err
		}
	}
	user := "system:serviceaccount:" + ControllerNamespace + ":argo-rollouts"
	for _, a := range []authorizationv1.ResourceAttributes{
		{Verb: "list", Group: "apps", Resource: "replicasets"},
		{Verb: "watch", Group: "argoproj.io", Resource: "rollouts"},
		{Verb: "patch", Resource: "configmaps", Namespace: "default"},
		{Verb: "patch", Resource: "secrets", Namespace: "default"},
	} {
		if err := WaitForAccess(ctx, cs, user, a); err != nil {
			return "", err
		}
	}
	return ServiceAccountKubeconfig(ctx, ctl.c, cs, ControllerNamespace, "argo-rollouts", ctl.Dir)
}

// Start starts the controller (it must not be running) in Dir with POD_NAMESPACE=argo-rollouts
// and waits up to 60 s until its rollout workers have started.
func (ctl *RolloutsController) Start() error {
	ctl.mu.Lock()
	defer ctl.mu.Unlock()
	p := ctl.proc
	if err := p.start(); err != nil {
		return err
	}
	ctl.pids = append(ctl.pids, p.PID())
	_ = os.WriteFile(filepath.Join(ctl.Dir, "pids"), []byte(fmt.Sprint(ctl.pids)+"\n"), 0o644)
	deadline := time.Now().Add(60 * time.Second)
	for {
		if strings.Contains(p.logSinceLastStart(), "Started rollout workers") {
			return nil
		}
		if !p.running() {
			_, err := p.result()
			return fmt.Errorf("rollouts-controller exited during start: %v\n%s", err, ctl.LogTail(40))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("rollouts-controller: no \"Started rollout workers\" after 60s\n%s", ctl.LogTail(40))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop sends SIGTERM to the controller, waits (SIGKILL after 15 s), and then makes sure the
// plugin processes it had started are gone. The controller must stop them itself: an error
// reports plugin processes that outlived it by more than 5 s (they are then killed, by PID).
// Safe to call when not running.
func (ctl *RolloutsController) Stop() error {
	ctl.mu.Lock()
	defer ctl.mu.Unlock()
	p := ctl.proc
	if p == nil || !p.running() {
		return nil
	}
	plugins := ChildPIDs(p.PID())
	p.stop(15 * time.Second)
	var survivors []int
	for _, pid := range plugins {
		if !waitPIDGone(pid, 5*time.Second) {
			survivors = append(survivors, pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
			waitPIDGone(pid, 5*time.Second)
		}
	}
	if len(survivors) > 0 {
		return fmt.Errorf("plugin process(es) %v outlived the controller (pid %d) by 5s; killed", survivors, p.PID())
	}
	return nil
}

// Restart is Stop then Start.
func (ctl *RolloutsController) Restart() error {
	if err := ctl.Stop(); err != nil {
		return err
	}
	return ctl.Start()
}

// PID is the running controller's PID (0 when stopped).
func (ctl *RolloutsController) PID() int {
	ctl.mu.Lock()
	defer ctl.mu.Unlock()
	if !ctl.proc.running() {
		return 0
	}
	return ctl.proc.PID()
}

// PIDs are all controller PIDs started so far.
func (ctl *RolloutsController) PIDs() []int {
	ctl.mu.Lock()
	defer ctl.mu.Unlock()
	return append([]int(nil), ctl.pids...)
}

// PluginPIDs are the running controller's child processes (the plugin processes).
func (ctl *RolloutsController) PluginPIDs() []int {
	if pid := ctl.PID(); pid != 0 {
		return ChildPIDs(pid)
	}
	return nil
}

// Log returns the whole controller log.
func (ctl *RolloutsController) Log() string {
	b, _ := os.ReadFile(ctl.LogPath)
	return string(b)
}

// LogTail returns the last n lines of the controller log.
func (ctl *RolloutsController) LogTail(n int) string { return ctl.proc.logTail(n) }

// Healthz reports whether the controller's healthz endpoint answers 200.
func (ctl *RolloutsController) Healthz() error {
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Get("http://127.0.0.1:" + strconv.Itoa(ctl.healthzPort) + "/healthz")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return errors.New(resp.Status)
	}
	return nil
}
