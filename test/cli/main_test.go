// Package cli proves the command line (the Job mode) against a real control plane: it waits
// for the ReplicaSet of the current pod template (a stale currentPodHash, -expect-template-
// annotation, workloadRef) and decides at once when it is there.
package cli

import (
	"os"
	"testing"

	"github.com/configmap-attacher/configmap-attacher/test/support/realapi"
)

func TestMain(m *testing.M) { os.Exit(realapi.Main(m, "cli")) }
