// Package controllermode (test/controllermode) tests `configmap-attacher controller` on a real control plane (etcd,
// kube-apiserver, kube-controller-manager from test/support/cluster), with the real Argo Rollouts
// controller (test/support/cluster's RolloutsController) wherever Rollouts move, the
// kube-controller-manager's Deployment controller for Deployments, and test/support/cluster's FakeKubelet
// so that pods become Ready only when their ConfigMaps and Secrets exist. The controller runs
// as its own process (the built binary) with the RBAC of examples/controller.yaml.
package controllermode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// env is the shared cluster with the Rollouts controller, the fake kubelet and one
// configmap-attacher controller (default selector, every namespace, no leader election).
type env struct {
	c          *cluster.Cluster
	rollouts   *cluster.RolloutsController
	kubelet    *cluster.FakeKubelet
	bin        string // the configmap-attacher binary
	kubeconfig string // the controller's ServiceAccount (examples/controller.yaml)
	ctl        *cluster.ControllerProcess
}

var (
	shared    *env
	sharedErr error
)

func TestMain(m *testing.M) {
	bin, err := cluster.PluginBinary()
	if err != nil {
		fmt.Fprintln(os.Stderr, "test/controllermode:", err)
		os.Exit(1)
	}
	var c *cluster.Cluster
	os.Exit(cluster.Main(m, cluster.MainOptions{Name: "test/controllermode", Parallel: 8, Shared: &c, Err: &sharedErr,
		// The workload controllers of every kind of user everyuser_test.go runs.
		Options: cluster.Options{ExtraControllers: []string{"statefulset-controller", "daemonset-controller",
			"job-controller", "cronjob-controller", "ttl-after-finished-controller"}},
		Setup: func(c *cluster.Cluster) (err error) {
			if shared, err = startEnv(c, bin); err == nil {
				fmt.Fprintf(os.Stderr, "test/controllermode: controller log %s\n", shared.ctl.LogPath)
			}
			return err
		},
		Teardown: func() error {
			shared.ctl.Stop()
			err := shared.rollouts.Stop()
			shared.kubelet.Stop()
			if err != nil {
				// As before: reported, not a failure of the run.
				fmt.Fprintln(os.Stderr, "test/controllermode: stopping the Rollouts controller:", err)
			}
			return nil
		},
	}))
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
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if e.kubeconfig, err = cluster.ControllerModeIdentity(ctx, c, cs); err != nil {
		return nil, err
	}
	if err = cluster.CreateReadyNode(ctx, cs, nodeName); err != nil { // for DaemonSets
		return nil, err
	}
	args := append([]string{"-kubeconfig", e.kubeconfig, "-leader-elect=false", "-resync", "1m", "-log-level", "debug"}, anchorGraceArgs()...)
	e.ctl, err = startController(c.Dir, bin, "shared", args...)
	if err != nil {
		return nil, err
	}
	return e, nil
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

// startController starts `configmap-attacher controller` with its log in
// dir/controller-<name>.log and waits until /readyz answers 200 (caches synced).
func startController(dir, bin, name string, args ...string) (*cluster.ControllerProcess, error) {
	return cluster.StartController(bin, name, filepath.Join(dir, "controller-"+name+".log"), 60*time.Second, nil, args...)
}

const prefix = "configmap_attacher_controller_"
