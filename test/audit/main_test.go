// Package audit proves `configmap-attacher audit` against a real control plane: the findings
// (lost, unowned, stray, legacy, shared), -fix under the core's rules, the requests it sends.
package audit

import (
	"os"
	"testing"

	"github.com/configmap-attacher/configmap-attacher/test/support/realapi"
)

func TestMain(m *testing.M) { os.Exit(realapi.Main(m, "audit")) }
