package cluster

import (
	"flag"
	"fmt"
	"os"
	"testing"
	"time"
)

// MainOptions configure Main, the TestMain of a package whose tests share one control plane.
type MainOptions struct {
	// Name prefixes Main's messages (the package).
	Name string
	// Parallel, when > 0, is the default of -test.parallel when the command line does not set
	// it: tests that mostly wait on controllers can run more at once than GOMAXPROCS.
	Parallel int
	// Options are the shared cluster's.
	Options Options
	// Precheck, when set, runs before the cluster starts: its error (a part that is missing
	// on this machine, ErrUnavailable) goes to *Err without starting anything.
	Precheck func() error
	// RolloutCRD installs the Argo Rollouts CRDs in the shared cluster.
	RolloutCRD bool
	// Shared and Err receive the shared cluster and the error that kept it (or Setup) from
	// starting: tests end with Require(t, *Shared, *Err), a skip or a failure, on that error.
	Shared **Cluster
	Err    *error
	// Setup, when set, starts the package's own shared parts on the running cluster (a
	// Rollouts controller, a fake kubelet, the controller mode); its error goes to *Err.
	Setup func(c *Cluster) error
	// Teardown, when set, stops what Setup started, before the cluster stops; an error fails a
	// run that passed.
	Teardown func() error
}

// Main parses the flags, starts the shared cluster and o.Setup, runs the tests, then
// o.Teardown and the cluster's Stop, and returns the exit code for os.Exit:
//
//	func TestMain(m *testing.M) {
//		os.Exit(cluster.Main(m, cluster.MainOptions{Name: "core", Shared: &shared, Err: &sharedErr}))
//	}
func Main(m *testing.M, o MainOptions) int {
	flag.Parse()
	if o.Parallel > 0 {
		explicit := false
		flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
		if !explicit {
			_ = flag.Set("test.parallel", fmt.Sprint(o.Parallel))
		}
	}
	var c *Cluster
	var err error
	start := time.Now()
	if o.Precheck != nil {
		err = o.Precheck()
	}
	if err == nil {
		c, err = StartShared(o.Options)
	}
	if err == nil && o.RolloutCRD {
		err = InstallRolloutCRD(c)
	}
	setUp := false
	if err == nil && o.Setup != nil {
		if err = o.Setup(c); err == nil {
			setUp = true
			fmt.Fprintf(os.Stderr, "%s: shared environment up in %v\n", o.Name, time.Since(start).Round(time.Millisecond))
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: shared environment: %v\n", o.Name, err)
	}
	if o.Shared != nil {
		*o.Shared = c
	}
	if o.Err != nil {
		*o.Err = err
	}
	code := m.Run()
	if setUp && o.Teardown != nil {
		if err := o.Teardown(); err != nil {
			fmt.Fprintf(os.Stderr, "%s: stopping the shared environment: %v\n", o.Name, err)
			if code == 0 {
				code = 1
			}
		}
	}
	c.Stop() // nil-safe; keeps the state directory with CMA_KEEP_CLUSTER_DIR=1
	return code
}
