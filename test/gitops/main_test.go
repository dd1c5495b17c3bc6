package gitops

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// env is the package's shared world: one control plane (with the job controller, so hook Jobs
// complete), the fake kubelet (which also runs our binary for pods of our image), the real Argo
// Rollouts controller with the step plugin registered, and the real Argo CD application
// controller and repo server.
type env struct {
	c        *cluster.Cluster
	kube     kubernetes.Interface
	kubelet  *cluster.FakeKubelet
	rollouts *cluster.RolloutsController
	argocd   *cluster.ArgoCD
	plugin   string // the built binary: step plugin, controller mode and command line
	// controllerKubeconfig is examples/controller.yaml's identity for the controller mode.
	controllerKubeconfig string
	dir                  string
}

// Image is the image examples/job.yaml runs: the fake kubelet runs the built binary for it.
const Image = "ghcr.io/configmap-attacher/configmap-attacher"

var (
	shared    *env
	sharedErr error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "cma-gitops-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var c *cluster.Cluster
	code := cluster.Main(m, cluster.MainOptions{Name: "test/gitops", Parallel: 8, Shared: &c, Err: &sharedErr,
		// The job controller completes the hook Jobs.
		Options: cluster.Options{ExtraControllers: []string{"job-controller"}},
		// Argo CD first: on a machine without the build it is the missing part (ErrUnavailable:
		// a skip, or a failure with CI=true).
		Precheck: func() error { _, err := cluster.ArgoCDDir(); return err },
		Setup: func(c *cluster.Cluster) (err error) {
			if shared, err = startEnv(c, dir); err == nil {
				fmt.Fprintf(os.Stderr, "test/gitops: Rollouts controller %s and Argo CD %s up (Argo CD logs in %s)\n",
					cluster.RolloutsVersion, cluster.ArgoCDVersion, shared.argocd.Dir)
			}
			return err
		},
		Teardown: func() error { shared.stop(); return nil },
	})
	os.RemoveAll(dir)
	os.Exit(code)
}

func startEnv(c *cluster.Cluster, dir string) (*env, error) {
	bin, err := cluster.PluginBinary()
	if err != nil {
		return nil, err
	}
	stepBin, err := cluster.StepPluginBinary() // what install-plugin gives the controller
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(c.AdminConfig)
	if err != nil {
		return nil, err
	}
	e := &env{c: c, kube: cs, plugin: bin, dir: dir, kubelet: cluster.StartFakeKubelet(cs)}
	// A pod of our image gets our binary with the pod's args and its ServiceAccount's token.
	e.kubelet.RunImage(Image, cluster.PodRunner{
		Binary: bin, LogDir: filepath.Join(c.Dir, "pod-logs"),
		Kubeconfig: func(ctx context.Context, ns, sa string) (string, error) {
			return cluster.ServiceAccountKubeconfig(ctx, c, cs, ns, sa, c.Dir)
		},
	})
	e.rollouts, err = cluster.StartRolloutsController(c, cluster.RolloutsControllerOptions{Version: cluster.RolloutsVersion, PluginBinary: stepBin})
	if err != nil {
		e.stop()
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if e.controllerKubeconfig, err = cluster.ControllerModeIdentity(ctx, c, cs); err != nil {
		e.stop()
		return nil, err
	}
	if e.argocd, err = cluster.StartArgoCD(c); err != nil {
		e.stop()
		return nil, err
	}
	return e, nil
}

func (e *env) stop() {
	e.argocd.Stop()
	if e.rollouts != nil {
		if err := e.rollouts.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "gitops: stopping the Rollouts controller:", err)
		}
	}
	e.kubelet.Stop()
}

// sharedEnv returns the package's environment, or skips (fails with CI=true) without one.
func sharedEnv(t *testing.T) *env {
	t.Helper()
	if sharedErr != nil {
		if errors.Is(sharedErr, cluster.ErrUnavailable) {
			cluster.SkipOrFail(t, sharedErr)
		}
		t.Fatalf("shared environment: %v", sharedErr)
	}
	if shared == nil {
		t.Fatal("no shared environment")
	}
	return shared
}
