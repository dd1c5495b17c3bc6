package rollouts

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// env is a cluster with an Argo Rollouts controller (plugin registered) and a FakeKubelet.
type env struct {
	c       *cluster.Cluster
	ctl     *cluster.RolloutsController
	kubelet *cluster.FakeKubelet
	plugin  string // the plugin binary (also the command-line tool)
}

var (
	shared    *env
	sharedErr error
	pluginBin string
	// stepBin is the step plugin's own binary, the one install-plugin gives the controller.
	stepBin   string
	pluginErr error
)

func TestMain(m *testing.M) {
	pluginBin, pluginErr = cluster.PluginBinary()
	if pluginErr == nil {
		stepBin, pluginErr = cluster.StepPluginBinary()
	}
	if pluginErr != nil {
		fmt.Fprintln(os.Stderr, "test/rollouts:", pluginErr)
	}
	var c *cluster.Cluster
	os.Exit(cluster.Main(m, cluster.MainOptions{Name: "test/rollouts", Parallel: 8, Shared: &c, Err: &sharedErr,
		Setup: func(c *cluster.Cluster) (err error) {
			if pluginErr != nil {
				return pluginErr
			}
			if shared, err = startEnv(c, cluster.RolloutsVersion); err == nil {
				fmt.Fprintf(os.Stderr, "test/rollouts: rollouts-controller %s pid %d, log %s\n", cluster.RolloutsVersion, shared.ctl.PID(), shared.ctl.LogPath)
			}
			return err
		},
		Teardown: func() error { return shared.stop() },
	}))
}

// startEnv starts the fake kubelet and a controller of the given version on c.
func startEnv(c *cluster.Cluster, version string) (*env, error) {
	cs, err := kubernetes.NewForConfig(c.AdminConfig)
	if err != nil {
		return nil, err
	}
	e := &env{c: c, kubelet: cluster.StartFakeKubelet(cs), plugin: pluginBin}
	e.ctl, err = cluster.StartRolloutsController(c, cluster.RolloutsControllerOptions{Version: version, PluginBinary: stepBin,
		PluginArgs: []string{"--log-level", "debug"}})
	if err != nil {
		e.kubelet.Stop()
		return nil, err
	}
	return e, nil
}

func (e *env) stop() error {
	err := e.ctl.Stop()
	e.kubelet.Stop()
	return err
}

// sharedEnv returns the package's environment, or skips (fails with CI=true) without one.
func sharedEnv(t *testing.T) *env {
	t.Helper()
	if pluginErr != nil {
		t.Fatalf("plugin binary: %v", pluginErr)
	}
	if sharedErr != nil {
		cluster.SkipOrFail(t, sharedErr)
	}
	if shared == nil {
		t.Fatal("no shared environment")
	}
	return shared
}

// ownEnv starts a separate cluster and controller of the given version for one test.
func ownEnv(t *testing.T, version string) *env {
	t.Helper()
	if pluginErr != nil {
		t.Fatalf("plugin binary: %v", pluginErr)
	}
	if _, err := cluster.RolloutsDir(version); err != nil {
		cluster.SkipOrFail(t, err)
	}
	c := cluster.Start(t, cluster.Options{})
	e, err := startEnv(c, version)
	if err != nil {
		if errors.Is(err, cluster.ErrUnavailable) {
			cluster.SkipOrFail(t, err)
		}
		t.Fatalf("controller %s: %v", version, err)
	}
	t.Cleanup(func() {
		if err := e.stop(); err != nil {
			t.Errorf("stopping controller %s: %v", version, err)
		}
		if t.Failed() {
			t.Logf("controller %s log: %s", version, e.ctl.LogPath)
		}
	})
	return e
}

// namespace creates the test's namespace and, when the test fails, logs the controller lines
// about it.
func (e *env) namespace(t *testing.T) string {
	t.Helper()
	ns := e.c.Namespace(t)
	cluster.LogLinesOnFailure(t, "controller", e.ctl.LogPath, e.ctl.Log, ns, 80)
	return ns
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
