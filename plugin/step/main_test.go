package step

import (
	"os"
	"testing"
	"time"

	"github.com/configmap-attacher/configmap-attacher/plugin"
)

// TestMain shortens the grace for missing objects: the unit tests' fakes never create one late.
func TestMain(m *testing.M) {
	plugin.Grace = 50 * time.Millisecond
	os.Exit(m.Run())
}
