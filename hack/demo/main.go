// Command demo is the README's "run it": on a local control plane (etcd, kube-apiserver,
// kube-controller-manager on 127.0.0.1, from test/support/cluster) with the real Argo Rollouts
// controller loading the plugin as users install it (test/rollouts), it takes a canary Rollout
// `web` through four revisions, each with its own content-hash named ConfigMap and Secret,
// and after each stage prints which ReplicaSet owns which object. It shows a stable pod
// replaced mid-canary finding its config after an Argo CD-style prune, and revisionHistoryLimit
// removing the oldest ReplicaSet with the garbage collector removing its ConfigMap and Secret.
//
//	make demo          # builds what it needs, runs, tears down
//	make demo KEEP=1   # keeps the cluster up until Ctrl-C, prints kubectl commands
//
// With -argocd (`make demo-argocd`) every revision is instead a commit to a file:// Git
// repository that the real Argo CD (test/support/cluster StartArgoCD) syncs with automated sync and
// prune, and the tree is printed after each sync (argocd.go).
//
// Flags: -plugin (the built plugin binary; built into a temporary directory when empty),
// -keep, -argocd. Every process it starts is stopped by PID at the end, also on failure or Ctrl-C. On
// failure it exits 1 with the reason and the log files of the controller and the control plane
// (kept).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	rolloutsclient "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned"
	"k8s.io/client-go/kubernetes"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

func main() {
	keep := flag.Bool("keep", false, "keep the cluster running after the demo, until SIGINT or SIGTERM (Ctrl-C)")
	plugin := flag.String("plugin", "", "the plugin binary (default: build it into a temporary directory)")
	argocd := flag.Bool("argocd", false, "sync every revision from a Git repository with the real Argo CD (make demo-argocd)")
	flag.Parse()
	os.Exit(run(*keep, *plugin, *argocd))
}

// demo is the running environment and what the demo has created so far.
type demo struct {
	ctx    context.Context
	start  time.Time
	plugin string

	c       *cluster.Cluster
	ctl     *cluster.RolloutsController
	kubelet *cluster.FakeKubelet
	mode    *cluster.ControllerProcess
	kube    kubernetes.Interface
	ro      rolloutsclient.Interface

	// argo and repo: the -argocd variant's Argo CD and Git repository.
	argo *cluster.ArgoCD
	repo *cluster.GitRepo

	revs       map[int]*revision
	pluginPIDs map[int]bool // plugin processes seen under the controller
}

func run(keep bool, plugin string, argocd bool) int {
	ctx, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	d := &demo{ctx: ctx, start: time.Now(), plugin: plugin, revs: map[int]*revision{}, pluginPIDs: map[int]bool{}}
	via := ""
	if argocd {
		via = ", synced from Git by Argo CD " + cluster.ArgoCDVersion
	}
	fmt.Printf("configmap-attacher demo: canary Rollout %s/%s through %d revisions, each with its own ConfigMap and Secret%s\n\n", namespace, appName, revisions, via)

	err := d.setup()
	if err == nil && argocd {
		err = d.startArgoCD()
	}
	if err == nil && argocd {
		err = d.scenarioArgoCD()
	} else if err == nil {
		err = d.scenario()
	}
	code := 0
	var failure string
	switch {
	case err != nil && ctx.Err() != nil:
		fmt.Println("\ninterrupted: tearing down")
		code = 130
	case err != nil:
		failure = d.failure(err)
		code = 1
		// Keep the state directory (logs) for the report below.
		os.Setenv("CMA_KEEP_CLUSTER_DIR", "1")
	case keep:
		d.keepRunning()
	default:
		fmt.Printf("\ndemo done in %v\n", time.Since(d.start).Round(100*time.Millisecond))
	}
	// A second Ctrl-C during tear-down kills the demo; its children then get SIGKILL
	// (Pdeathsig).
	stopSignals()
	d.teardown()
	if failure != "" {
		fmt.Fprint(os.Stderr, failure)
	}
	return code
}

// setup starts the control plane, the Rollouts controller with the plugin registered, and the
// fake kubelet.
func (d *demo) setup() error {
	bin, err := cluster.FindBinDir() // builds missing binaries, progress on stderr
	if err != nil {
		return err
	}
	if d.plugin == "" {
		say("building the plugin binary (or reusing the tests' build of the same sources) ...")
		if d.plugin, err = cluster.PluginBinary(); err != nil {
			return err
		}
	}
	if d.plugin, err = filepath.Abs(d.plugin); err != nil {
		return err
	}
	if fi, err := os.Stat(d.plugin); err != nil || fi.Mode()&0o111 == 0 {
		return fmt.Errorf("plugin binary %s: not an executable (%v); run `make build`", d.plugin, err)
	}

	t0 := time.Now()
	fmt.Print("   starting etcd, kube-apiserver and kube-controller-manager on 127.0.0.1 ... ")
	c, err := startClusterQuietly()
	if err != nil {
		fmt.Println("failed")
		return fmt.Errorf("start the control plane (%s): %w", bin, err)
	}
	d.c = c
	pids := c.PIDs()
	fmt.Printf("up in %v\n", since(t0))
	say("  etcd pid %d, kube-apiserver pid %d (%s), kube-controller-manager pid %d",
		pids["etcd"], pids["kube-apiserver"], c.Host, pids["kube-controller-manager"])
	if d.kube, err = kubernetes.NewForConfig(c.AdminConfig); err != nil {
		return err
	}
	if d.ro, err = rolloutsclient.NewForConfig(c.AdminConfig); err != nil {
		return err
	}

	t0 = time.Now()
	fmt.Printf("   starting the Argo Rollouts controller %s with the plugin registered ... ", cluster.RolloutsVersion)
	if d.ctl, err = cluster.StartRolloutsController(c, cluster.RolloutsControllerOptions{Version: cluster.RolloutsVersion, PluginBinary: d.plugin,
		// As the examples install it: owner references only on opted-in objects (the demo labels them).
		PluginArgs: []string{"--require-opt-in"}}); err != nil {
		fmt.Println("failed")
		return fmt.Errorf("start the Argo Rollouts controller: %w", err)
	}
	fmt.Printf("up in %v\n", since(t0))
	say("  pid %d; argo-rollouts-config stepPlugins: %s at file://%s", d.ctl.PID(), cluster.PluginName, d.plugin)
	say("  plugin identity: ServiceAccount %s/argo-rollouts, the controller's ClusterRole + examples/rbac-step-plugin.yaml", cluster.ControllerNamespace)
	t0 = time.Now()
	fmt.Print("   starting the controller mode (configmap-attacher controller) ... ")
	if d.mode, err = d.startControllerMode(); err != nil {
		fmt.Println("failed")
		return fmt.Errorf("start the controller mode: %w", err)
	}
	fmt.Printf("ready in %v\n", since(t0))
	say("  pid %d; identity: ServiceAccount %s/%s with examples/controller.yaml's RBAC; opted-in objects (%s=true) only; log %s",
		d.mode.PID(), cluster.ControllerModeNamespace, cluster.ControllerModeServiceAccount, cluster.LabelRevisioned, d.mode.LogPath)
	d.kubelet = cluster.StartFakeKubelet(d.kube)
	say("fake kubelet started: pods become Ready; a pod whose ConfigMap or Secret is missing gets CreateContainerConfigError")
	return nil
}

// startClusterQuietly is cluster.StartShared without its "shared cluster up" line on stderr
// (the demo prints its own). Errors carry the details.
func startClusterQuietly() (*cluster.Cluster, error) {
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return cluster.StartShared(cluster.Options{})
	}
	defer devnull.Close()
	stderr := os.Stderr
	os.Stderr = devnull
	defer func() { os.Stderr = stderr }()
	return cluster.StartShared(cluster.Options{})
}

// keepRunning prints how to look at the environment and waits for SIGINT or SIGTERM.
func (d *demo) keepRunning() {
	kubectl := filepath.Join(d.c.BinDir, "kubectl")
	kc := d.c.KubeconfigPath
	fmt.Printf("\n── demo done in %v; kept running (-keep) until Ctrl-C\n", time.Since(d.start).Round(100*time.Millisecond))
	fmt.Printf("admin kubeconfig: %s\n", kc)
	fmt.Printf("try:\n")
	fmt.Printf("  %s --kubeconfig %s get rollout,rs,cm,secret -n default\n", kubectl, kc)
	fmt.Printf("  %s --kubeconfig %s get cm,secret -n default -l %s=true -o custom-columns='KIND:.kind,NAME:.metadata.name,OWNED BY:.metadata.ownerReferences[*].name'\n", kubectl, kc, cluster.LabelRevisioned)
	fmt.Printf("  %s --kubeconfig %s describe rollout web -n default   # ConfigAttached events\n", kubectl, kc)
	if d.argo != nil {
		fmt.Printf("  %s --kubeconfig %s get application -n %s %s -o yaml   # Argo CD's view: sync, health, the last sync's result\n", kubectl, kc, cluster.ArgoCDNamespace, argoApp)
		fmt.Printf("  git -C %s log --stat   # the revisions Argo CD synced\n", d.repo.Dir)
	}
	fmt.Printf("  export KUBECONFIG=%s   # for your own kubectl\n", kc)
	fmt.Printf("logs: rollouts-controller %s\n      kube-apiserver %s\n", d.ctl.LogPath, d.c.LogPath("kube-apiserver"))
	if d.argo != nil {
		fmt.Printf("      argocd application-controller %s\n", d.argo.ControllerLog)
	}
	if d.mode != nil {
		fmt.Printf("      controller mode %s (metrics and health on 127.0.0.1: %s)\n", d.mode.LogPath, strings.TrimPrefix(d.mode.HealthURL, "http://"))
	}
	fmt.Printf("press Ctrl-C (SIGINT) or send SIGTERM to tear everything down\n")
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-d.ctx.Done():
			fmt.Println("\nsignal received: tearing down")
			return
		case <-t.C:
			d.notePluginPIDs()
		}
	}
}

// notePluginPIDs remembers the plugin processes the controller has started, so that tear-down
// can stop any that outlive a controller killed from outside (e.g. a terminal's Ctrl-C reaches
// the whole process group; go-plugin servers ignore SIGINT).
func (d *demo) notePluginPIDs() {
	if d.ctl == nil {
		return
	}
	for _, pid := range d.ctl.PluginPIDs() {
		d.pluginPIDs[pid] = true
	}
}

// teardown stops every process the demo started, by PID: fake kubelet, controller (and its
// plugin processes), kube-controller-manager, kube-apiserver, etcd.
func (d *demo) teardown() {
	t0 := time.Now()
	var stopped []string
	stopped = append(stopped, d.stopArgoCD()...)
	if d.kubelet != nil {
		d.kubelet.Stop()
	}
	if d.mode != nil {
		stopped = append(stopped, fmt.Sprintf("controller mode %d", d.mode.PID()))
		d.mode.Stop()
	}
	if d.ctl != nil {
		d.notePluginPIDs()
		for _, pid := range d.ctl.PIDs() {
			stopped = append(stopped, fmt.Sprintf("rollouts-controller %d", pid))
		}
		if err := d.ctl.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "demo: stopping the controller: %v\n", err)
		}
		for pid := range d.pluginPIDs {
			if d.stopPlugin(pid) {
				stopped = append(stopped, fmt.Sprintf("plugin %d (left behind)", pid))
			}
		}
	}
	var survivors []string
	if d.c != nil {
		pids := d.c.PIDs()
		d.c.Stop()
		for _, name := range []string{"kube-controller-manager", "kube-apiserver", "etcd"} {
			if pid := pids[name]; pid != 0 {
				stopped = append(stopped, fmt.Sprintf("%s %d", name, pid))
				if cluster.PIDAlive(pid) {
					survivors = append(survivors, fmt.Sprintf("%s %d", name, pid))
				}
			}
		}
	}
	if len(stopped) > 0 {
		say("torn down in %v: %s", since(t0), strings.Join(stopped, ", "))
	}
	if len(survivors) > 0 {
		fmt.Fprintf(os.Stderr, "demo: still running after tear-down: %s\n", strings.Join(survivors, ", "))
	}
}

// stopPlugin ends a plugin process of this demo's controller that is still alive, after
// checking the PID still belongs to it (its command line is under the controller's
// directory). It reports whether it had to.
func (d *demo) stopPlugin(pid int) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !cluster.PIDAlive(pid) || !strings.Contains(string(cmdline), d.ctl.Dir) {
		return false
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	for i := 0; i < 20 && cluster.PIDAlive(pid); i++ {
		time.Sleep(100 * time.Millisecond)
	}
	if cluster.PIDAlive(pid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return true
}

// failure is the report of a failed demo: the reason, then where to look.
func (d *demo) failure(err error) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\ndemo FAILED after %v: %v\n", time.Since(d.start).Round(100*time.Millisecond), err)
	if d.ctl != nil {
		// The controller's warnings and errors and the plugin's lines, newest last, shortened.
		var lines []string
		for _, l := range strings.Split(d.ctl.Log(), "\n") {
			if strings.Contains(l, "level=warning") || strings.Contains(l, "level=error") || strings.Contains(l, "plugin.configmap-attacher") {
				if len(l) > 300 {
					l = l[:300] + " ..."
				}
				lines = append(lines, l)
			}
		}
		if len(lines) > 8 {
			lines = lines[len(lines)-8:]
		}
		if len(lines) > 0 {
			fmt.Fprintf(&b, "last controller warnings/errors and plugin lines:\n  %s\n", strings.Join(lines, "\n  "))
		}
		fmt.Fprintf(&b, "rollouts-controller log:      %s\n", d.ctl.LogPath)
	}
	if d.c != nil {
		for _, n := range []string{"kube-apiserver", "kube-controller-manager", "etcd"} {
			fmt.Fprintf(&b, "%-29s %s\n", n+" log:", d.c.LogPath(n))
		}
		fmt.Fprintf(&b, "state kept in %s (remove it when done)\n", d.c.Dir)
	}
	return b.String()
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
