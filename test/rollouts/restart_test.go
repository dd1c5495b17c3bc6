package rollouts

import (
	"slices"
	"testing"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// 5. The controller restarted (a) while the rollout is paused after the step and (b) while
// it is down when a new revision is applied, before the step runs: the rollout carries on, and
// the step runs for the new revision. The plugin process goes away with the controller (or
// the restarted controller could not copy the file:// plugin into plugin-bin/). The controller
// and the plugin listen on loopback only.
//
// Not parallel: it restarts the shared controller, so it runs before the parallel tests.
func TestControllerRestart(t *testing.T) {
	e := sharedEnv(t)
	a := newApp(t, e, e.namespace(t), "web", stepsPluginFirst)
	a.createConfig(1)
	a.deploy(1)
	a.waitHealthy(1)
	a.createConfig(2)
	a.deploy(2)
	st, _ := a.waitStep(0, 2)
	a.waitOwned(2, a.rsFor(2))
	a.waitPaused(2)

	// (a) restart while paused after the step.
	before := e.ctl.PluginPIDs()
	if len(before) == 0 {
		t.Fatalf("no plugin process under controller pid %d after a step ran", e.ctl.PID())
	}
	oldPID := e.ctl.PID()
	if err := e.ctl.Healthz(); err != nil {
		t.Errorf("controller healthz on 127.0.0.1: %v", err)
	}
	for _, pid := range append([]int{oldPID}, before...) {
		addrs, err := cluster.ListeningAddrs(pid)
		if err != nil {
			t.Fatal(err)
		}
		for _, addr := range addrs {
			if !cluster.IsLoopbackAddr(addr) {
				t.Errorf("pid %d listens on %s, beyond loopback", pid, addr)
			}
		}
	}
	if err := e.ctl.Restart(); err != nil {
		t.Fatalf("restart: %v", err)
	}
	for _, pid := range before {
		if cluster.PIDAlive(pid) {
			t.Errorf("plugin process %d still alive after the controller %d stopped", pid, oldPID)
		}
	}
	t.Logf("controller restarted: pid %d -> %d; plugin processes %v stopped with it", oldPID, e.ctl.PID(), before)
	a.waitPaused(2)
	if s := stepRun(a.get(), 0); s == nil || s.Executions != st.Executions || s.Phase != st.Phase {
		t.Errorf("step status changed across the restart: before %+v, after %+v", st, s)
	}
	a.promote()
	a.waitHealthy(2)

	// (b) a new revision applied while the controller is down: the step runs after the start.
	if err := e.ctl.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	a.createConfig(3)
	a.deploy(3)
	if err := e.ctl.Start(); err != nil {
		t.Fatalf("start: %v", err)
	}
	a.waitStep(0, 3)
	a.waitOwned(3, a.rsFor(3))
	a.waitPaused(2)
	after := e.ctl.PluginPIDs()
	if len(after) == 0 || slices.Equal(after, before) {
		t.Errorf("plugin processes before %v, after %v: want new ones", before, after)
	}
	a.promote()
	a.waitHealthy(3)
	t.Logf("controller pids over the test: %v", e.ctl.PIDs())
}
