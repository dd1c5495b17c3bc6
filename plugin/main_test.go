package plugin

import (
	"os"
	"testing"
	"time"
)

// TestMain shortens the grace for missing objects: the unit tests' fakes never create one late.
func TestMain(m *testing.M) {
	Grace = 50 * time.Millisecond
	os.Exit(m.Run())
}
