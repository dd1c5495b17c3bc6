package plugin

import (
	"strings"
	"testing"
	"time"
)

// TestMaintainedBy: the pure decision "does a live controller maintain this object", Lease by
// Lease.
func TestMaintainedBy(t *testing.T) {
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	ref := LeaseRef{Namespace: "configmap-attacher", Name: "configmap-attacher"}
	live := func(mod func(*ControllerLease)) ControllerLease {
		renew := now.Add(-4 * time.Second)
		l := ControllerLease{Ref: ref, Found: true, Holder: "cma-0", RenewTime: &renew, Duration: 15 * time.Second,
			Labels:      map[string]string{ControllerLeaseLabel: "true"},
			Annotations: ScopeAnnotations(nil, OptInSelector(), []string{"rollouts", "deployments"})}
		if mod != nil {
			mod(&l)
		}
		return l
	}
	at := func(d time.Duration) func(*ControllerLease) {
		return func(l *ControllerLease) { r := now.Add(d); l.RenewTime = &r }
	}
	opted := map[string]string{OptInLabel: "true"}
	for _, tc := range []struct {
		name   string
		leases []ControllerLease
		labels map[string]string
		ns     string
		want   string // the Lease, or "" and this in the reasons
		why    string
	}{
		{name: "live, all namespaces, opted in", leases: []ControllerLease{live(nil)}, labels: opted, want: ref.String()},
		{name: "no Lease configured", labels: opted, why: "no controller Lease is configured"},
		{name: "absent", leases: []ControllerLease{{Ref: ref}}, labels: opted, why: "not found"},
		{name: "forbidden", leases: []ControllerLease{{Ref: ref, Forbidden: true}}, labels: opted, why: "forbidden"},
		{name: "read error", leases: []ControllerLease{{Ref: ref, Err: "timeout"}}, labels: opted, why: "could not read it: timeout"},
		{name: "expired", leases: []ControllerLease{live(at(-30 * time.Second))}, labels: opted, why: "not renewed since"},
		{name: "within the skew", leases: []ControllerLease{live(at(-18 * time.Second))}, labels: opted, want: ref.String()},
		{name: "just past the skew", leases: []ControllerLease{live(at(-20 * time.Second))}, labels: opted, why: "expired 5s ago"},
		{name: "renewed in the future (skew the other way)", leases: []ControllerLease{live(at(3 * time.Second))}, labels: opted, want: ref.String()},
		{name: "released", leases: []ControllerLease{live(func(l *ControllerLease) { l.Holder = "" })}, labels: opted, why: "no holder"},
		{name: "no renewal", leases: []ControllerLease{live(func(l *ControllerLease) { l.RenewTime = nil })}, labels: opted, why: "no renewal"},
		{name: "not a controller's Lease", leases: []ControllerLease{live(func(l *ControllerLease) { l.Labels = nil })}, labels: opted, why: "no label"},
		{name: "namespace not watched", leases: []ControllerLease{live(func(l *ControllerLease) { l.Annotations[LeaseNamespacesAnnotation] = "a,b" })}, labels: opted, why: "watches namespaces a, b, not shop"},
		{name: "namespace watched", leases: []ControllerLease{live(func(l *ControllerLease) { l.Annotations[LeaseNamespacesAnnotation] = "a,shop" })}, labels: opted, want: ref.String()},
		{name: "not opted in", leases: []ControllerLease{live(nil)}, labels: map[string]string{"app": "web"}, why: "does not match the controller's selector"},
		{name: "custom selector", leases: []ControllerLease{live(func(l *ControllerLease) { l.Annotations[LeaseSelectorAnnotation] = "team=a" })},
			labels: map[string]string{"team": "a"}, want: ref.String()},
		{name: "no selector recorded", leases: []ControllerLease{live(func(l *ControllerLease) { delete(l.Annotations, LeaseSelectorAnnotation) })}, labels: opted, why: "no selector recorded"},
		{name: "a selector that selects everything is no controller's", leases: []ControllerLease{live(func(l *ControllerLease) { l.Annotations[LeaseSelectorAnnotation] = "" })}, labels: opted, why: "not one a controller runs with"},
		{name: "Deployments only", leases: []ControllerLease{live(func(l *ControllerLease) { l.Annotations[LeaseWorkloadsAnnotation] = "deployments" })}, labels: opted, why: "does not act for Rollouts"},
		{name: "the second of two", leases: []ControllerLease{{Ref: ref}, live(func(l *ControllerLease) { l.Ref.Namespace = "cma-b" })}, labels: opted, want: "cma-b/configmap-attacher"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := tc.ns
			if ns == "" {
				ns = "shop"
			}
			got, why := MaintainedBy(tc.leases, KindRollout, ns, tc.labels, now)
			if got != tc.want {
				t.Fatalf("MaintainedBy = %q (%v), want %q", got, why, tc.want)
			}
			if tc.want == "" && !strings.Contains(strings.Join(why, "; "), tc.why) {
				t.Errorf("reasons %q lack %q", why, tc.why)
			}
		})
	}
}

func TestParseLeaseRef(t *testing.T) {
	if r, err := ParseLeaseRef("cma/configmap-attacher"); err != nil || r != (LeaseRef{"cma", "configmap-attacher"}) {
		t.Errorf("%v %v", r, err)
	}
	for _, bad := range []string{"", "name", "/name", "ns/", "Bad_NS/x", "ns/Bad_Name"} {
		if _, err := ParseLeaseRef(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
