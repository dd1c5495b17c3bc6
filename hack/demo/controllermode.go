package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// startControllerMode runs `configmap-attacher controller` on the host as
// examples/controller.yaml runs it in a cluster: it applies that file's ServiceAccount and
// RBAC (without the Deployment), starts the binary with the ServiceAccount's token, listening
// on 127.0.0.1 only, and returns once /readyz answers (the caches are synced).
func (d *demo) startControllerMode() (*cluster.ControllerProcess, error) {
	ctx, cancel := context.WithTimeout(d.ctx, 30*time.Second)
	defer cancel()
	kc, err := cluster.ControllerModeIdentity(ctx, d.c, d.kube)
	if err != nil {
		return nil, err
	}
	// One replica here: no leader election (the Lease needs the pod's namespace).
	m, err := cluster.LaunchController(d.plugin, "demo", filepath.Join(d.c.Dir, "controller-mode.log"),
		[]string{"KUBECONFIG=/nonexistent"}, "-kubeconfig", kc, "-leader-elect=false")
	if err != nil {
		return nil, fmt.Errorf("start %s controller: %w", d.plugin, err)
	}
	err = d.waitFor(30*time.Second, "the controller mode to report ready", func() (bool, string, error) {
		ok, state := m.Ready()
		return ok, state, nil
	})
	if err != nil {
		m.Stop()
		return nil, fmt.Errorf("%w (log: %s)", err, m.LogPath)
	}
	return m, nil
}
