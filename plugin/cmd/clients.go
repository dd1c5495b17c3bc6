package cmd

import (
	"flag"
	"fmt"
	"strings"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/plugin/cli"
	"github.com/configmap-attacher/configmap-attacher/plugin/clientset"
	"github.com/configmap-attacher/configmap-attacher/plugin/controller"
)

// Clients builds the API clients of every command from its client flags (--kubeconfig,
// --context, --as, --as-group; the controller's --qps and --burst): the one place a command
// gets its clients, and the one seam where a test puts fakes. A nil field builds the real
// clients. Every command holds one (its Clients field, which the root passes down).
//
// The step plugin is the exception that proves the rule: its binary must not link this
// package (its import graph is tested), so package stepplugin builds the core's narrow clients
// itself, lazily (plugin.LazyClient). Every mode reads its REST config from plugin.RESTConfig.
type Clients struct {
	// Typed builds the clients of the Job, audit, doctor and cleanup (nil: clientset.New).
	Typed func(plugin.ClientOptions) (clientset.Clients, error)
	// Controller builds the controller's clients from the REST config its process built
	// (nil: controller.DefaultClients, with a dynamic client for the Rollouts' templates; a
	// test's fakes read Rollouts as metadata only).
	Controller func(*rest.Config) (kube kubernetes.Interface, meta metadata.Interface, lease kubernetes.Interface, err error)
	// Served asks whether the Argo Rollouts kinds are served (nil: controller.DefaultServed).
	Served func(*rest.Config) (controller.Served, error)
}

// typed builds the clients of a command that reads Rollouts, Deployments and their users.
func (c Clients) typed(o plugin.ClientOptions) (clientset.Clients, error) {
	if c.Typed != nil {
		return c.Typed(o)
	}
	return clientset.New(o)
}

// controller gives the controller's process its clients: the process builds them from the
// REST config it counts requests on (controller.RunProcess), with these seams.
func (c Clients) controller(pc *controller.ProcessConfig) {
	pc.Clients, pc.Served = c.Controller, c.Served
}

// clientFlags registers how a command reaches the apiserver, as kubectl spells it:
// --kubeconfig, --context, --as, --as-group.
func clientFlags(fs *flag.FlagSet, o *plugin.ClientOptions) {
	cli.KubeconfigFlag(fs, &o.Kubeconfig)
	fs.StringVar(&o.Context, "context", "", "the kubeconfig context to use (default: its current context)")
	fs.StringVar(&o.Impersonate, "as", "", "act as this user (impersonation, as kubectl --as), e.g. system:serviceaccount:NS:NAME")
	fs.Var((*listValue)(&o.ImpersonateGroups), "as-group", "act as a member of this group, repeatable (needs --as)")
}

// clientProblems checks the client flags.
func clientProblems(o plugin.ClientOptions) []string {
	if len(o.ImpersonateGroups) > 0 && o.Impersonate == "" {
		return []string{fmt.Sprintf("-as-group %s needs -as USER: the apiserver impersonates groups only with a user", strings.Join(o.ImpersonateGroups, ","))}
	}
	return nil
}
