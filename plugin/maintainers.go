package plugin

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Who keeps the owners of shared config current. A run scoped to one workload (the step, the
// Job) can keep true only what that workload's own later runs see again: its own ReplicaSets.
// An object that other users share needs someone who sees their later revisions too: the
// controller mode, when it is live and maintains that object. The controller says so on its
// leader Lease (the label and annotations below, written by the holder on every renewal); the
// step and the Job read the Lease(s) named by -controller-lease (read.go readLeases) and decide
// here, purely.

// The controller's marks on its leader Lease.
const (
	// ControllerLeaseLabel marks the Lease of a configmap-attacher controller ("true").
	ControllerLeaseLabel = "configmap-attacher.io/controller"
	// LeaseNamespacesAnnotation is the watched namespaces, comma-separated ("": all).
	LeaseNamespacesAnnotation = "configmap-attacher.io/namespaces"
	// LeaseSelectorAnnotation is the opt-in selector of the objects the controller maintains.
	LeaseSelectorAnnotation = "configmap-attacher.io/selector"
	// LeaseWorkloadsAnnotation is the workload kinds it acts for, comma-separated (rollouts,
	// deployments).
	LeaseWorkloadsAnnotation = "configmap-attacher.io/workloads"
)

// LeaseSkew is the clock skew allowed between the reader and the controller that renewed a
// Lease: a Lease counts as live until renewTime + leaseDurationSeconds + LeaseSkew.
const LeaseSkew = 5 * time.Second

// LeaseRef names a Lease.
type LeaseRef struct{ Namespace, Name string }

func (r LeaseRef) String() string { return r.Namespace + "/" + r.Name }

// DefaultControllerLeases are where the step and the Job look for the controller by default:
// the one default Lease, that of the chart's release configmap-attacher in namespace
// configmap-attacher (its full name), of examples/controller.yaml and of the controller's
// -leader-election-id default.
var DefaultControllerLeases = []LeaseRef{
	{Namespace: "configmap-attacher", Name: "configmap-attacher"},
}

// ParseLeaseRef reads NAMESPACE/NAME.
func ParseLeaseRef(s string) (LeaseRef, error) {
	ns, name, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok || ns == "" || name == "" {
		return LeaseRef{}, fmt.Errorf("%q: want NAMESPACE/NAME of the controller's Lease, e.g. configmap-attacher/configmap-attacher", s)
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return LeaseRef{}, fmt.Errorf("%q: namespace %q is not valid: %s", s, ns, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return LeaseRef{}, fmt.Errorf("%q: name %q is not a valid Lease name: %s", s, name, strings.Join(errs, "; "))
	}
	return LeaseRef{Namespace: ns, Name: name}, nil
}

// ControllerLease is what one read of a Lease found.
type ControllerLease struct {
	Ref LeaseRef
	// Found: the Lease exists (and was read).
	Found bool
	// Forbidden: the RBAC refused the get (it counts as no controller, with a warning).
	Forbidden bool
	// Err is another failed read (it counts as no controller).
	Err                 string
	Holder              string
	RenewTime           *time.Time
	Duration            time.Duration
	Labels, Annotations map[string]string
}

// ScopeAnnotations are the annotations a controller with this scope writes on its Lease.
func ScopeAnnotations(namespaces []string, selector labels.Selector, workloads []string) map[string]string {
	return map[string]string{
		LeaseNamespacesAnnotation: strings.Join(namespaces, ","),
		LeaseSelectorAnnotation:   selector.String(),
		LeaseWorkloadsAnnotation:  strings.Join(workloads, ","),
	}
}

// WorkloadsName is a workload kind as the controller's -workloads names it ("rollouts").
func WorkloadsName(kind string) string { return strings.ToLower(kind) + "s" }

// MaintainedBy decides whether a live controller maintains an object: the first Lease that is
// live (a holder, renewed within its duration, LeaseSkew allowed), marked by a controller
// (ControllerLeaseLabel), whose scope covers the namespace, whose selector matches the object's
// labels and whose workloads include kind (the run's workload kind, whose ReplicaSets are among
// the users). It returns that Lease, or "" and why each Lease does not do it (for messages).
func MaintainedBy(leases []ControllerLease, kind, ns string, objLabels map[string]string, now time.Time) (string, []string) {
	var why []string
	for _, l := range leases {
		if r := leaseVerdict(l, kind, ns, objLabels, now); r != "" {
			why = append(why, "Lease "+l.Ref.String()+": "+r)
			continue
		}
		return l.Ref.String(), nil
	}
	if len(leases) == 0 {
		why = append(why, "no controller Lease is configured (-controller-lease)")
	}
	return "", why
}

// CoversNamespace reports whether some Lease stands for a live controller acting for kind in
// namespace ns, whatever the object's labels: only then are an object's labels worth a read.
func CoversNamespace(leases []ControllerLease, kind, ns string, now time.Time) bool {
	for _, l := range leases {
		if liveVerdict(l, kind, ns, now) == "" {
			return true
		}
	}
	return false
}

// leaseVerdict is why one Lease does not stand for a controller maintaining the object ("": it
// does).
func leaseVerdict(l ControllerLease, kind, ns string, objLabels map[string]string, now time.Time) string {
	if r := liveVerdict(l, kind, ns, now); r != "" {
		return r
	}
	raw, ok := l.Annotations[LeaseSelectorAnnotation]
	if !ok {
		return "no selector recorded (" + LeaseSelectorAnnotation + ")"
	}
	sel, err := labels.Parse(raw)
	if err != nil || !Positive(sel) {
		return fmt.Sprintf("its selector %q is not one a controller runs with", raw)
	}
	if !sel.Matches(labels.Set(objLabels)) {
		return fmt.Sprintf("the object does not match the controller's selector %s", raw)
	}
	return ""
}

// liveVerdict is why one Lease does not stand for a live controller acting for kind in ns ("":
// it does).
func liveVerdict(l ControllerLease, kind, ns string, now time.Time) string {
	switch {
	case l.Forbidden:
		return "may not get it (forbidden)"
	case l.Err != "":
		return "could not read it: " + l.Err
	case !l.Found:
		return "not found (no controller with leader election there)"
	case l.Labels[ControllerLeaseLabel] != "true":
		return fmt.Sprintf("not a configmap-attacher controller's (no label %s=true: a controller older than this step, or another program's Lease)", ControllerLeaseLabel)
	case l.Holder == "":
		return "no holder (no controller replica leads)"
	case l.RenewTime == nil || l.Duration <= 0:
		return "no renewal recorded"
	}
	if expires := l.RenewTime.Add(l.Duration + LeaseSkew); !now.Before(expires) {
		return fmt.Sprintf("held by %s but not renewed since %s (expired %s ago): the controller is not running", l.Holder,
			l.RenewTime.UTC().Format(time.RFC3339), now.Sub(l.RenewTime.Add(l.Duration)).Round(time.Second))
	}
	if nss := splitCSV(l.Annotations[LeaseNamespacesAnnotation]); len(nss) > 0 && !slices.Contains(nss, ns) {
		return fmt.Sprintf("the controller watches namespaces %s, not %s", strings.Join(nss, ", "), ns)
	}
	if kind != "" {
		if wl := splitCSV(l.Annotations[LeaseWorkloadsAnnotation]); !slices.Contains(wl, WorkloadsName(kind)) {
			return fmt.Sprintf("the controller's -workloads is %q: it does not act for %ss", strings.Join(wl, ","), kind)
		}
	}
	return ""
}

func splitCSV(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
