package step

import (
	"k8s.io/client-go/kubernetes"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/plugin/clientset"
	"github.com/configmap-attacher/configmap-attacher/test/support/fakemeta"
	"github.com/configmap-attacher/configmap-attacher/test/support/fixtures"
)

const testNS = fixtures.Namespace

// clientsOf serves both clients from one typed fake.
func clientsOf(c kubernetes.Interface) plugin.Clients {
	return plugin.Clients{Kube: clientset.Typed(c), Meta: fakemeta.New(c)}
}
