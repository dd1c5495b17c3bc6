package e2e

import (
	"context"
	"errors"
	"flag"
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
	pluginErr error
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	// The tests mostly wait on controllers: run more of them at once than GOMAXPROCS (the
	// default of -parallel) unless -parallel is given.
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		_ = flag.Set("test.parallel", "8")
	}
	start := time.Now()
	pluginBin, pluginErr = cluster.PluginBinary()
	if pluginErr != nil {
		fmt.Fprintln(os.Stderr, "e2e:", pluginErr)
	}
	c, err := cluster.StartShared(cluster.Options{})
	if err == nil && pluginErr != nil {
		err = pluginErr
	}
	if err == nil {
		shared, err = startEnv(c, cluster.RolloutsVersion)
	}
	sharedErr = err
	if sharedErr != nil {
		fmt.Fprintln(os.Stderr, "e2e: shared environment:", sharedErr)
	} else {
		fmt.Fprintf(os.Stderr, "e2e: shared cluster and rollouts-controller %s up in %v (controller pid %d, log %s)\n",
			cluster.RolloutsVersion, time.Since(start).Round(time.Millisecond), shared.ctl.PID(), shared.ctl.LogPath)
	}
	code := m.Run()
	if shared != nil {
		if err := shared.stop(); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: stopping the shared controller:", err)
			if code == 0 {
				code = 1
			}
		}
	}
	c.Stop() // nil-safe; keeps the state directory with CMA_KEEP_CLUSTER_DIR=1
	return code
}

// startEnv starts the fake kubelet and a controller of the given version on c.
func startEnv(c *cluster.Cluster, version string) (*env, error) {
	cs, err := kubernetes.NewForConfig(c.AdminConfig)
	if err != nil {
		return nil, err
	}
	e := &env{c: c, kubelet: cluster.StartFakeKubelet(cs), plugin: pluginBin}
	e.ctl, err = cluster.StartRolloutsController(c, cluster.RolloutsControllerOptions{Version: version, PluginBinary: pluginBin,
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
