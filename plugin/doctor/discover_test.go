package doctor

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/configmap-attacher/configmap-attacher/test/support/fakemeta"
)

// In a pod (helm test), the metrics Service found beside the Deployment is fetched by its
// cluster DNS name on the Service's port; a Service of another instance, or one whose port does
// not reach -metrics-addr, is not taken for it.
func TestDiscoveredMetricsFetchedInCluster(t *testing.T) {
	l := map[string]string{LabelName: AppName, LabelInstance: "cma"}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "cma-configmap-attacher", Namespace: "ops", Labels: l},
		Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: l},
			Spec: corev1.PodSpec{ServiceAccountName: "cma-configmap-attacher", Containers: []corev1.Container{{Name: "controller",
				Args: []string{"controller"}, Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 8080}, {Name: "health", ContainerPort: 8081}}}}}}}}
	svc := func(name string, labels map[string]string, target string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ops", Labels: labels},
			Spec: corev1.ServiceSpec{Selector: l, Ports: []corev1.ServicePort{{Port: 9999, TargetPort: intstr.FromString(target)}}}}
	}
	other := map[string]string{LabelName: AppName, LabelInstance: "other"}
	holder, dur, renew := "pod-a", int32(3600), metav1.NowMicro()
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: DefaultLeaseName, Namespace: "ops"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &dur, RenewTime: &renew}}
	kube := fake.NewClientset(dep, lease, svc("a-health", l, "health"), svc("b-other-instance", other, "metrics"), svc("c-metrics", l, "metrics"))
	kube.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		sar.Status.Allowed = true
		return true, sar, nil
	})
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "configmap_attacher_controller_leader 1\n")
	}))
	t.Cleanup(srv.Close)
	target, _ := url.Parse(srv.URL)
	// Every request goes to the test server; the URL doctor built is recorded.
	hc := &http.Client{Transport: roundTrip(func(r *http.Request) (*http.Response, error) {
		asked = append(asked, r.URL.String())
		r2 := r.Clone(r.Context())
		r2.URL.Scheme, r2.URL.Host = target.Scheme, target.Host
		return http.DefaultTransport.RoundTrip(r2)
	})}
	o := Defaults()
	o.Modes, o.Discover, o.HTTP, o.InCluster = []string{ModeController}, true, hc, func() bool { return true }
	o.ParseControllerArgs = func([]string) (ControllerArgs, error) {
		return ControllerArgs{LeaderElect: true, LeaseName: DefaultLeaseName, MetricsAddr: ":8080"}, nil
	}
	rep := (&Doctor{Kube: kube, Meta: fakemeta.New(kube), Opts: o}).Run(context.Background())
	want := "http://c-metrics.ops.svc:9999/metrics"
	if rep.Failed() || len(asked) != 1 || asked[0] != want || len(find(rep, OK, "controller/metrics")) != 1 {
		t.Errorf("asked %v, want [%s]:\n%s", asked, want, text(rep))
	}
	if !strings.Contains(text(rep), "metrics Service c-metrics:9999") {
		t.Errorf("the install line does not name the metrics Service:\n%s", text(rep))
	}
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
