package cluster

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// cliFlag is one command-line flag the harness passes to a control-plane binary, with the
// Kubernetes minor versions (1.N) whose binary has it. A binary refuses a flag it does not know
// ("unknown flag") and exits, so a flag is passed only to the versions that have it; since and
// until are checked against every built version's --help by TestHarnessFlagsKnown.
type cliFlag struct {
	arg string
	// since is the first minor whose binary has the flag (0: every version in KubeVersions);
	// until, when not 0, the last.
	since, until int
}

// in reports whether the binary of Kubernetes 1.minor has the flag.
func (f cliFlag) in(minor int) bool { return minor >= f.since && (f.until == 0 || minor <= f.until) }

// kubeMinor is N of "v1.N.P".
func kubeMinor(version string) (int, error) {
	parts := strings.Split(strings.TrimPrefix(version, "v"), ".")
	if len(parts) != 3 || parts[0] != "1" {
		return 0, fmt.Errorf("kube version %q: want v1.N.P", version)
	}
	n, err := strconv.Atoi(parts[1])
	if err != nil {
		return 0, fmt.Errorf("kube version %q: minor %q: %w", version, parts[1], err)
	}
	return n, nil
}

// forVersion returns the arguments of flags that version's binary has.
func forVersion(version string, flags []cliFlag) ([]string, error) {
	minor, err := kubeMinor(version)
	if err != nil {
		return nil, err
	}
	var args []string
	for _, f := range flags {
		if f.in(minor) {
			args = append(args, f.arg)
		}
	}
	return args, nil
}

// apiserverFlags are kube-apiserver's flags (Options.ExtraAPIServerArgs are appended as given).
func (c *Cluster) apiserverFlags(port int) []cliFlag {
	return []cliFlag{
		{arg: "--bind-address=127.0.0.1"}, {arg: "--advertise-address=127.0.0.1"},
		{arg: "--secure-port=" + strconv.Itoa(port)},
		{arg: "--etcd-servers=" + c.EtcdURL},
		{arg: "--cert-dir=" + c.Dir},
		{arg: "--client-ca-file=" + c.pki.caFile},
		{arg: "--tls-cert-file=" + c.pki.servingCertFile}, {arg: "--tls-private-key-file=" + c.pki.servingKeyFile},
		{arg: "--service-account-key-file=" + c.pki.saPubFile},
		{arg: "--service-account-signing-key-file=" + c.pki.saKeyFile},
		{arg: "--service-account-issuer=https://kubernetes.default.svc.cluster.local"},
		{arg: "--service-cluster-ip-range=10.0.0.0/24"},
		{arg: "--authorization-mode=RBAC"},
		// Without it the log fills with errors about the loopback endpoint.
		{arg: "--endpoint-reconciler-type=none"},
		{arg: "--allow-privileged=true"},
		{arg: "--profiling=false"},
	}
}

// apiserverArgs is the kube-apiserver command line for c.KubeVersion.
func (c *Cluster) apiserverArgs(port int) ([]string, error) {
	args, err := forVersion(c.KubeVersion, c.apiserverFlags(port))
	if err != nil {
		return nil, err
	}
	return append(args, c.opts.ExtraAPIServerArgs...), nil
}

// controllerManagerFlags are kube-controller-manager's flags.
func (c *Cluster) controllerManagerFlags() []cliFlag {
	return []cliFlag{
		{arg: "--kubeconfig=" + c.KubeconfigPath},
		{arg: "--secure-port=0"},
		{arg: "--leader-elect=false"},
		{arg: "--controllers=" + strings.Join(append(append([]string(nil), Controllers...), c.opts.ExtraControllers...), ",")},
		{arg: "--service-account-private-key-file=" + c.pki.saKeyFile},
		{arg: "--root-ca-file=" + c.pki.caFile},
		{arg: "--use-service-account-credentials=false"},
		{arg: "--cluster-name=cma-test"},
	}
}

// controllerManagerArgs is the kube-controller-manager command line for c.KubeVersion.
func (c *Cluster) controllerManagerArgs() ([]string, error) {
	return forVersion(c.KubeVersion, c.controllerManagerFlags())
}

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
