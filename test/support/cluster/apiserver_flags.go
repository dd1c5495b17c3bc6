package cluster

import (
	"errors"
	"sync"
)

var (
	baseArgsMu sync.Mutex
	baseArgs   = map[*Cluster][]string{}
)

// RestartAPIServerWithArgs stops kube-apiserver (if it runs) and starts it again on the same
// port, certificates and data with extra appended to the command line it was first started
// with (Options.ExtraAPIServerArgs included); extra replaces the extra arguments of an
// earlier call, so RestartAPIServerWithArgs() goes back to the original flags. It is how a
// test throttles a running cluster for a while, e.g.
//
//	c.RestartAPIServerWithArgs("--enable-priority-and-fairness=false", "--max-requests-inflight=2")
//
// (system:masters, the AdminConfig, is exempt from the in-flight limits).
func (c *Cluster) RestartAPIServerWithArgs(extra ...string) error {
	if c == nil || c.apiserver == nil {
		return errors.New("no kube-apiserver")
	}
	baseArgsMu.Lock()
	base, ok := baseArgs[c]
	if !ok {
		base = append([]string(nil), c.apiserver.args...)
		baseArgs[c] = base
	}
	baseArgsMu.Unlock()
	if c.apiserver.running() {
		if err := c.StopAPIServer(); err != nil {
			return err
		}
	}
	c.apiserver.mu.Lock()
	c.apiserver.args = append(append([]string(nil), base...), extra...)
	c.apiserver.mu.Unlock()
	return c.StartAPIServer()
}

// APIServerRunning reports whether kube-apiserver's process is alive.
func (c *Cluster) APIServerRunning() bool { return c != nil && c.apiserver.running() }

// RestartControllerManager stops kube-controller-manager (SIGTERM, SIGKILL after 3 s) and
// starts it again with the same flags: a fresh garbage collector, whose graph is built anew
// from lists (a soak uses it to tell a leak of the collector's own graph from wrong owner
// references).
func (c *Cluster) RestartControllerManager() error {
	if c == nil || c.kcm == nil {
		return errors.New("no kube-controller-manager")
	}
	c.kcm.stop(kcmGrace)
	if err := c.kcm.start(); err != nil {
		return err
	}
	return c.writePIDs()
}

// StopControllerManager stops kube-controller-manager (SIGTERM, SIGKILL after 3 s) until
// StartControllerManager: a benchmark that creates Pods directly (no kubelet) stops it while it
// creates a ReplicaSet's Pods, so that the replicaset-controller, which would create the
// ReplicaSet's replicas itself and then delete the surplus, finds the count already matching.
func (c *Cluster) StopControllerManager() error {
	if c == nil || c.kcm == nil {
		return errors.New("no kube-controller-manager")
	}
	c.kcm.stop(kcmGrace)
	return nil
}

// StartControllerManager starts kube-controller-manager again after StopControllerManager,
// with the same flags.
func (c *Cluster) StartControllerManager() error {
	if c == nil || c.kcm == nil {
		return errors.New("no kube-controller-manager")
	}
	if err := c.kcm.start(); err != nil {
		return err
	}
	return c.writePIDs()
}
