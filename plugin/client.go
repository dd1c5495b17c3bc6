package plugin

import (
	"fmt"
	"sync"

	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// ClientOptions configure the Kubernetes client.
type ClientOptions struct {
	// Kubeconfig is an explicit kubeconfig path. Empty means in-cluster, else $KUBECONFIG or
	// ~/.kube/config. A controller run outside a cluster passes its own --kubeconfig flag to
	// nobody, so the plugin's args can name one.
	Kubeconfig string
	// Context is the kubeconfig context to use instead of its current one (--context): a
	// context exists only in a kubeconfig, so naming one skips the in-cluster config.
	Context string
	// Impersonate and ImpersonateGroups act as another user (--as, --as-group), as kubectl
	// does: to check what a ServiceAccount can do before it runs.
	Impersonate       string
	ImpersonateGroups []string
	// QPS and Burst are client-side rate limits. client-go's defaults (5 QPS, burst 10) would
	// make a 100-object step take 20 s; ours let one step send all its requests at once and
	// leave flow control to the apiserver (API Priority and Fairness).
	QPS   float32
	Burst int
}

// Default client-side limits: a 100-object step (1 list + 100 patches) fits in one burst.
const (
	DefaultQPS   = 50
	DefaultBurst = 200
)

// RESTConfig builds the client configuration: an explicit kubeconfig, else in-cluster, else
// $KUBECONFIG or ~/.kube/config.
func RESTConfig(o ClientOptions) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	switch {
	case o.Kubeconfig != "" || o.Context != "":
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		rules.ExplicitPath = o.Kubeconfig
		cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules,
			&clientcmd.ConfigOverrides{CurrentContext: o.Context}).ClientConfig()
	default:
		cfg, err = rest.InClusterConfig()
		if err != nil {
			cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
				clientcmd.NewDefaultClientConfigLoadingRules(), &clientcmd.ConfigOverrides{}).ClientConfig()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("loading Kubernetes client config (in-cluster, $KUBECONFIG, ~/.kube/config or -kubeconfig): %w", err)
	}
	if o.Impersonate != "" {
		cfg.Impersonate = rest.ImpersonationConfig{UserName: o.Impersonate, Groups: o.ImpersonateGroups}
	}
	cfg.QPS, cfg.Burst = o.QPS, o.Burst
	if cfg.QPS == 0 {
		cfg.QPS = DefaultQPS
	}
	if cfg.Burst == 0 {
		cfg.Burst = DefaultBurst
	}
	cfg.UserAgent = "configmap-attacher/" + Version
	return cfg, nil
}

// Clients are the clients of the core: Kube for ReplicaSets, the other users and Events,
// and the metadata client for ConfigMaps and Secrets (their data never enters the process).
// The modes that read more (Rollouts, Deployments, informers) hold clientset.Clients.
type Clients struct {
	Kube Kube
	Meta metadata.Interface
}

// ClientFunc returns the clients. The step calls it on every Run so that a client that
// failed to build (say, the apiserver was unreachable at start) is retried later instead of
// failing InitPlugin, which the controller never retries.
type ClientFunc func() (Clients, error)

// LazyClient returns a ClientFunc that builds the clients on first use and caches them; a
// failure is returned to the caller and retried on the next call.
func LazyClient(o ClientOptions) ClientFunc {
	var mu sync.Mutex
	var c *Clients
	return func() (Clients, error) {
		mu.Lock()
		defer mu.Unlock()
		if c != nil {
			return *c, nil
		}
		built, err := NewClients(o)
		if err != nil {
			return Clients{}, err
		}
		c = &built
		return built, nil
	}
}

// NewClients builds the core's clients from one configuration.
func NewClients(o ClientOptions) (Clients, error) {
	cfg, err := RESTConfig(o)
	if err != nil {
		return Clients{}, err
	}
	return ClientsForConfig(cfg)
}

// ClientsForConfig builds the core's clients from a REST config as given (tests wrap it, e.g.
// to count requests).
func ClientsForConfig(cfg *rest.Config) (Clients, error) {
	kube, err := NewKube(cfg, nil)
	if err != nil {
		return Clients{}, fmt.Errorf("creating Kubernetes client: %w", err)
	}
	meta, err := metadata.NewForConfig(cfg)
	if err != nil {
		return Clients{}, fmt.Errorf("creating Kubernetes metadata client: %w", err)
	}
	return Clients{Kube: kube, Meta: meta}, nil
}
