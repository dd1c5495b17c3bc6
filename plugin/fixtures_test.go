package plugin

import (
	"github.com/configmap-attacher/configmap-attacher/test/fixtures"
)

const testNS = fixtures.Namespace
