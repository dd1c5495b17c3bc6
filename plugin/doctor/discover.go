package doctor

import (
	"context"
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The labels every install of the controller carries (the chart's, and so the examples' and the
// Kustomize base's, which are renderings of it). Leases carry none: an install's Lease is found
// through its Deployment's -leader-election-id.
const (
	LabelName     = "app.kubernetes.io/name"
	LabelInstance = "app.kubernetes.io/instance"
	// AppName is the value of LabelName.
	AppName = "configmap-attacher"
)

// ControllerArgs is what doctor needs of a controller Deployment's arguments. They are parsed
// by the controller's own flag set (Options.ParseControllerArgs), so that its defaults and its
// syntax are exactly the controller's.
type ControllerArgs struct {
	// Namespaces the controller watches (empty: all).
	Namespaces []string
	Selector   labels.Selector
	// LeaderElect, and the Lease: LeaseNamespace is empty when the controller takes the pod's.
	LeaderElect               bool
	LeaseNamespace, LeaseName string
	// MetricsAddr is -metrics-addr (host:port).
	MetricsAddr string
}

// Explicit says which of the options the command line set: they override what discovery reads
// from each install.
type Explicit struct {
	ServiceAccount, LeaderElect, LeaseNamespace, LeaseName, MetricsURL, Namespaces, OptIn bool
}

// Any reports whether a flag naming an install's identity was given (then doctor can check a
// controller that carries no labels, by those names alone).
func (e Explicit) Any() bool { return e.ServiceAccount || e.LeaseName }

// Install is one controller installation found by its labels.
type Install struct {
	Namespace  string
	Deployment string
	Instance   string
	// ServiceAccount is the pod template's (default "default").
	ServiceAccount string
	Args           ControllerArgs
	// MetricsService is the Service of the same instance whose selector picks the Deployment's
	// pods and whose port reaches -metrics-addr's ("" when there is none).
	MetricsService string
	MetricsPort    int32
}

// controllerContainer returns the container that runs `configmap-attacher controller` and its
// arguments after "controller" (nil when none does: the release's test Pod, another mode).
func controllerContainer(d *appsv1.Deployment) (*corev1.Container, []string) {
	for i := range d.Spec.Template.Spec.Containers {
		c := &d.Spec.Template.Spec.Containers[i]
		args := append(append([]string{}, c.Command...), c.Args...)
		for j, a := range args {
			if a == "controller" {
				return c, args[j+1:]
			}
		}
	}
	return nil, nil
}

// discover lists the controller Deployments by their labels (in -controller-namespace if given,
// else in every namespace; of one instance if -instance is given) and reads each one's
// ServiceAccount, arguments and metrics Service.
func (d *Doctor) discover(ctx context.Context, r *Report) []Install {
	sel := labels.Set{LabelName: AppName}
	if d.Opts.Instance != "" {
		sel[LabelInstance] = d.Opts.Instance
	}
	ns := d.Opts.DiscoverNamespace
	where := "every namespace"
	if ns != "" {
		where = "namespace " + ns
	}
	subject := "Deployments labelled " + sel.String() + " in " + where
	cctx, cancel := d.call(ctx)
	list, err := d.Kube.AppsV1().Deployments(ns).List(cctx, metav1.ListOptions{LabelSelector: sel.String()})
	cancel()
	if err != nil {
		r.problem(Error, "controller/install", subject, "grant the identity running doctor list on deployments.apps (in "+where+"), or pass -controller-namespace where the controller runs",
			"cannot list them: %v", err)
		return nil
	}
	sort.Slice(list.Items, func(i, j int) bool {
		return list.Items[i].Namespace+"/"+list.Items[i].Name < list.Items[j].Namespace+"/"+list.Items[j].Name
	})
	var out []Install
	for i := range list.Items {
		dep := &list.Items[i]
		c, args := controllerContainer(dep)
		if c == nil {
			continue
		}
		in := Install{Namespace: dep.Namespace, Deployment: dep.Name, Instance: dep.Labels[LabelInstance],
			ServiceAccount: dep.Spec.Template.Spec.ServiceAccountName}
		if in.ServiceAccount == "" {
			in.ServiceAccount = "default"
		}
		depSubject := "Deployment " + dep.Namespace + "/" + dep.Name
		if d.Opts.ParseControllerArgs == nil {
			r.problem(Error, "controller/install", depSubject, "", "no parser of the controller's arguments (a bug)")
			continue
		}
		a, err := d.Opts.ParseControllerArgs(args)
		if err != nil {
			r.problem(Error, "controller/install", depSubject, "fix the controller's args in the Deployment (configmap-attacher controller -help)",
				"its controller container's args do not parse: %v", err)
			continue
		}
		in.Args = a
		if in.Args.LeaseNamespace == "" {
			in.Args.LeaseNamespace = dep.Namespace // the controller's default: its pod's namespace
		}
		d.findMetricsService(ctx, r, dep, c, &in)
		out = append(out, in)
	}
	if len(out) == 0 {
		if d.Opts.Explicit.Any() {
			r.problem(Warning, "controller/install", subject, "label the controller's Deployment "+LabelName+"="+AppName+" (and "+LabelInstance+"), as the chart does, for doctor to read its settings",
				"none runs `configmap-attacher controller`: checked the names the flags give")
			return nil
		}
		r.problem(Error, "controller/install", subject,
			"install the controller (docs/install.md), or point doctor at it: -controller-namespace, -instance, or for an unlabelled Deployment -controller-service-account and -leader-election-id",
			"none runs `configmap-attacher controller`")
	}
	return out
}

// findMetricsService finds the Service of the install's instance that selects the Deployment's
// pods on the port -metrics-addr listens on.
func (d *Doctor) findMetricsService(ctx context.Context, r *Report, dep *appsv1.Deployment, c *corev1.Container, in *Install) {
	_, portStr, err := net.SplitHostPort(in.Args.MetricsAddr)
	if err != nil {
		return
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return
	}
	sel := labels.Set{LabelName: AppName}
	if in.Instance != "" {
		sel[LabelInstance] = in.Instance
	}
	cctx, cancel := d.call(ctx)
	list, err := d.Kube.CoreV1().Services(dep.Namespace).List(cctx, metav1.ListOptions{LabelSelector: sel.String()})
	cancel()
	if err != nil {
		r.problem(Warning, "controller/metrics", "Services of Deployment "+dep.Namespace+"/"+dep.Name,
			"grant the identity running doctor list on services in "+dep.Namespace+", or pass -metrics-url", "cannot list them: %v", err)
		return
	}
	podLabels := labels.Set(dep.Spec.Template.Labels)
	for _, s := range list.Items {
		if len(s.Spec.Selector) == 0 || !labels.SelectorFromSet(s.Spec.Selector).Matches(podLabels) {
			continue
		}
		for _, p := range s.Spec.Ports {
			if targets(p.TargetPort, p.Port, c, int32(port)) {
				in.MetricsService, in.MetricsPort = s.Name, p.Port
				return
			}
		}
	}
}

// targets reports whether a Service port reaches the container's port.
func targets(tp intstr.IntOrString, svcPort int32, c *corev1.Container, port int32) bool {
	switch {
	case tp.Type == intstr.String && tp.StrVal != "":
		for _, cp := range c.Ports {
			if cp.Name == tp.StrVal {
				return cp.ContainerPort == port
			}
		}
		return false
	case tp.IntVal != 0:
		return tp.IntVal == port
	default:
		return svcPort == port // targetPort defaults to port
	}
}

// inCluster reports whether doctor runs in a pod, where a Service's DNS name resolves.
func inCluster() bool { return os.Getenv("KUBERNETES_SERVICE_HOST") != "" }

// forInstall is a copy of d that checks one install: what the flags did not set is the install's.
func (d *Doctor) forInstall(in Install) *Doctor {
	c := *d
	o := &c.Opts
	e := d.Opts.Explicit
	o.ControllerNamespace = in.Namespace
	if !e.ServiceAccount {
		o.ControllerServiceAccount = in.ServiceAccount
	}
	if !e.LeaderElect {
		o.LeaderElect = in.Args.LeaderElect
	}
	if !e.LeaseNamespace {
		o.LeaseNamespace = in.Args.LeaseNamespace
	}
	if !e.LeaseName {
		o.LeaseName = in.Args.LeaseName
	}
	if !e.Namespaces {
		o.Namespaces = in.Args.Namespaces
	}
	if !e.OptIn && in.Args.Selector != nil {
		o.OptIn = in.Args.Selector
	}
	if !e.MetricsURL {
		o.MetricsURL = ""
		o.metricsService = in.MetricsService
		if in.MetricsService != "" {
			o.MetricsURL = fmt.Sprintf("http://%s.%s.svc:%d/metrics", in.MetricsService, in.Namespace, in.MetricsPort)
		}
	}
	return &c
}

// describe is the one line that says what was found.
func (in Install) describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "instance %q: ServiceAccount %s", in.Instance, in.ServiceAccount)
	if in.Args.LeaderElect {
		fmt.Fprintf(&b, ", Lease %s/%s", in.Args.LeaseNamespace, in.Args.LeaseName)
	} else {
		b.WriteString(", no leader election")
	}
	if len(in.Args.Namespaces) > 0 {
		fmt.Fprintf(&b, ", watches %s", strings.Join(in.Args.Namespaces, ","))
	} else {
		b.WriteString(", watches every namespace")
	}
	if in.MetricsService != "" {
		fmt.Fprintf(&b, ", metrics Service %s:%d", in.MetricsService, in.MetricsPort)
	}
	return b.String()
}
