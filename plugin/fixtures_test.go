package plugin

import (
	"github.com/configmap-attacher/configmap-attacher/test/support/fixtures"
)

const testNS = fixtures.Namespace
