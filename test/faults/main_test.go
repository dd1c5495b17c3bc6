// Package faults proves the step under faults of the real control plane: the apiserver
// stopped mid-step, throttling, conflicts with the garbage collector (docs/reliability.md).
package faults

import (
	"os"
	"testing"

	"github.com/configmap-attacher/configmap-attacher/test/support/realapi"
)

func TestMain(m *testing.M) { os.Exit(realapi.Main(m, "faults")) }
