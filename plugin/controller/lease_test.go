package controller

import (
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/configmap-attacher/configmap-attacher/plugin"
)

// TestLeaseMarks: every create and update of the leader Lease carries the controller's label
// and scope, keeps other labels and annotations, and the marks decide MaintainedBy as the step
// reads them.
func TestLeaseMarks(t *testing.T) {
	kube := fake.NewClientset()
	c := &Controller{cfg: Config{LeaderKube: kube, Namespaces: []string{"team-a", "team-b"}, Selector: plugin.OptInSelector(), Rollouts: true, Deployments: true}}
	leases := c.markedLeases().Leases("cma")
	l, err := leases.Create(t.Context(), &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "configmap-attacher", Namespace: "cma"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{plugin.LeaseNamespacesAnnotation: "team-a,team-b", plugin.LeaseSelectorAnnotation: plugin.OptInLabel + "=true",
		plugin.LeaseWorkloadsAnnotation: "rollouts,deployments"}
	for k, v := range want {
		if l.Annotations[k] != v {
			t.Errorf("created: annotation %s=%q, want %q", k, l.Annotations[k], v)
		}
	}
	if l.Labels[plugin.ControllerLeaseLabel] != "true" {
		t.Errorf("created: labels %v", l.Labels)
	}
	// Someone else's label survives an update; the marks are written again.
	l.Labels["team"] = "platform"
	delete(l.Annotations, plugin.LeaseSelectorAnnotation)
	if l, err = leases.Update(t.Context(), l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if l.Labels["team"] != "platform" || l.Annotations[plugin.LeaseSelectorAnnotation] == "" {
		t.Errorf("updated: labels %v annotations %v", l.Labels, l.Annotations)
	}
}
