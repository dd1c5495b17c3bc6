package cluster

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

var (
	shared    *Cluster
	sharedErr error
)

func TestMain(m *testing.M) {
	os.Exit(Main(m, MainOptions{Name: "test/support/cluster", Shared: &shared, Err: &sharedErr}))
}

func newReplicaSet(name string) *appsv1.ReplicaSet {
	zero := int32(0)
	labels := map[string]string{"app": name}
	return &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: &zero,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/none"}}},
			},
		},
	}
}

// assertGC creates a ReplicaSet and a ConfigMap owned only by it, deletes the ReplicaSet and
// waits for the garbage collector to delete the ConfigMap.
func assertGC(t *testing.T, cs kubernetes.Interface, ns, name string) {
	t.Helper()
	ctx := context.Background()
	rs, err := cs.AppsV1().ReplicaSets(ns).Create(ctx, newReplicaSet(name), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f := false
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-cm", OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: &f,
		}}},
		Data: map[string]string{"k": "v"},
	}
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The owner still exists: the collector must leave the ConfigMap alone.
	time.Sleep(500 * time.Millisecond)
	if _, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, cm.Name, metav1.GetOptions{}); err != nil {
		t.Fatalf("ConfigMap with a live owner: %v", err)
	}
	start := time.Now()
	if err := cs.AppsV1().ReplicaSets(ns).Delete(ctx, rs.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, cm.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			t.Logf("ConfigMap garbage-collected %v after its owner ReplicaSet was deleted", time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("ConfigMap %s/%s still there 30s after its only owner was deleted (err %v)", ns, cm.Name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestGarbageCollectorDeletesOwnedConfigMap(t *testing.T) {
	c := Require(t, shared, sharedErr)
	assertGC(t, c.Client(t), c.Namespace(t), "rs-gc")
}

func TestServiceAccountConfigIsLimitedByRBAC(t *testing.T) {
	c := Require(t, shared, sharedErr)
	ns := c.Namespace(t)
	ctx := context.Background()
	admin := c.Client(t)
	if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := c.ServiceAccountConfig(t, ns, "reader", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}}, nil)
	sa, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sa.CoreV1().ConfigMaps(ns).Get(ctx, "cm", metav1.GetOptions{}); err != nil {
		t.Fatalf("get with the granted verb: %v", err)
	}
	_, err = sa.CoreV1().ConfigMaps(ns).Patch(ctx, "cm", types.MergePatchType, []byte(`{"data":{"a":"b"}}`), metav1.PatchOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("patch without RBAC: want 403 Forbidden, got %v", err)
	}
	if !strings.Contains(err.Error(), "system:serviceaccount:"+ns+":reader") {
		t.Errorf("403 should name the service account identity, got %v", err)
	}
	if _, err := sa.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("list without RBAC: want 403, got %v", err)
	}
	if _, err := sa.CoreV1().ConfigMaps("default").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("get in another namespace: want 403, got %v", err)
	}

	// The same identity from a child process through WriteKubeconfig.
	kc := c.WriteKubeconfig(t, cfg)
	out, err := exec.Command(c.BinDir+"/kubectl", "--kubeconfig", kc, "-n", ns, "get", "configmap", "cm", "-o", "name").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "configmap/cm" {
		t.Fatalf("kubectl get as the service account: %v: %s", err, out)
	}
	out, err = exec.Command(c.BinDir+"/kubectl", "--kubeconfig", kc, "-n", ns, "patch", "configmap", "cm", "--type=merge", "-p", `{"data":{"a":"b"}}`).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "Forbidden") {
		t.Fatalf("kubectl patch as the service account: want Forbidden, got %v: %s", err, out)
	}
	out, err = exec.Command(c.BinDir+"/kubectl", "--kubeconfig", c.KubeconfigPath, "auth", "whoami", "-o", "jsonpath={.status.userInfo.groups}").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "system:masters") {
		t.Fatalf("admin kubeconfig: %v: %s", err, out)
	}
}

func TestClusterRulesAndApplyYAML(t *testing.T) {
	c := Require(t, shared, sharedErr)
	ns := c.Namespace(t)
	ctx := context.Background()
	// Cluster-wide list of replicasets via ServiceAccountConfig's clusterRules.
	cfg := c.ServiceAccountConfig(t, ns, "lister", nil, []rbacv1.PolicyRule{{APIGroups: []string{"apps"}, Resources: []string{"replicasets"}, Verbs: []string{"list"}}})
	sa := kubernetes.NewForConfigOrDie(cfg)
	if _, err := sa.AppsV1().ReplicaSets("").List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("cluster-wide list: %v", err)
	}

	// RBAC from YAML, namespace moved to the test namespace.
	yaml := `
apiVersion: v1
kind: ServiceAccount
metadata: {name: patcher, namespace: argo-rollouts}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: cma-test-patch-configmaps}
rules:
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: cma-test-patch-configmaps}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cma-test-patch-configmaps}
subjects:
- {kind: ServiceAccount, name: patcher, namespace: argo-rollouts}
`
	objs := c.ApplyYAML(t, nil, []byte(yaml), ns)
	if len(objs) != 3 || objs[0].GetNamespace() != ns || objs[2].GetName() != "cma-test-patch-configmaps-"+ns {
		t.Fatalf("applied objects: %v", objs)
	}
	user := "system:serviceaccount:" + ns + ":patcher"
	c.WaitForRBAC(t, user, "", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"patch"}}})
}

func TestCountingTransport(t *testing.T) {
	c := Require(t, shared, sharedErr)
	ns := c.Namespace(t)
	ctx := context.Background()
	counter := NewCounter()
	cs := kubernetes.NewForConfigOrDie(counter.Wrap(c.AdminConfig))
	if _, err := cs.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := counter.String(); got != "list replicasets=1" || counter.Count("list", "replicasets") != 1 {
		t.Fatalf("after one List: %q", got)
	}
	counter.Reset()
	if counter.Total() != 0 {
		t.Fatalf("after Reset: %q", counter)
	}
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := cs.CoreV1().ConfigMaps(ns).Patch(ctx, "x", types.MergePatchType, []byte(`{"data":{"i":"1"}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "x", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	w, err := cs.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.Stop()
	if err := cs.CoreV1().ConfigMaps(ns).Delete(ctx, "x", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	want := "create configmaps=1 delete configmaps=1 get configmaps=1 get serviceaccounts=1 patch configmaps=3 watch configmaps=1"
	if got := counter.String(); got != want {
		t.Fatalf("counts:\n got %s\nwant %s", got, want)
	}
}

func TestClassifyRequest(t *testing.T) {
	for _, tc := range []struct{ method, url, want string }{
		{"GET", "/api/v1/namespaces/ns/configmaps", "list configmaps"},
		{"GET", "/api/v1/configmaps", "list configmaps"},
		{"GET", "/api/v1/namespaces/ns/configmaps?watch=true&resourceVersion=1", "watch configmaps"},
		{"GET", "/api/v1/watch/namespaces/ns/configmaps", "watch configmaps"},
		{"GET", "/api/v1/namespaces/ns/configmaps/a", "get configmaps"},
		{"PATCH", "/api/v1/namespaces/ns/configmaps/a", "patch configmaps"},
		{"PUT", "/apis/apps/v1/namespaces/ns/replicasets/r", "update replicasets"},
		{"PATCH", "/apis/argoproj.io/v1alpha1/namespaces/ns/rollouts/r/status", "patch rollouts/status"},
		{"POST", "/api/v1/namespaces/ns/secrets", "create secrets"},
		{"DELETE", "/api/v1/namespaces/ns/secrets/s", "delete secrets"},
		{"DELETE", "/api/v1/namespaces/ns/secrets", "deletecollection secrets"},
		{"GET", "/api/v1/namespaces", "list namespaces"},
		{"GET", "/api/v1/namespaces/ns", "get namespaces"},
		{"PUT", "/api/v1/namespaces/ns/finalize", "update namespaces/finalize"},
		{"POST", "/api/v1/namespaces/ns/serviceaccounts/sa/token", "create serviceaccounts/token"},
		{"GET", "/apis/apps/v1", "get /apis/apps/v1"},
		{"GET", "/version", "get /version"},
	} {
		req, _ := http.NewRequest(tc.method, "https://127.0.0.1:1"+tc.url, nil)
		if got := ClassifyRequest(req).String(); got != tc.want {
			t.Errorf("%s %s: got %q, want %q", tc.method, tc.url, got, tc.want)
		}
	}
}

// TestCounterListPagesApart: with ListPagesApart a list's continued pages count as list-page,
// the first page as list; without it every page is a list.
func TestCounterListPagesApart(t *testing.T) {
	sent := roundTripperFunc(func(*http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Body: http.NoBody}, nil
	})
	for _, apart := range []bool{true, false} {
		c := &Counter{ListPagesApart: apart}
		rt := c.WrapTransport(sent)
		for _, url := range []string{"/api/v1/namespaces/ns/pods?limit=500", "/api/v1/namespaces/ns/pods?limit=500&continue=abc", "/api/v1/namespaces/ns/pods?limit=500&continue=def"} {
			req, _ := http.NewRequest("GET", "https://127.0.0.1:1"+url, nil)
			resp, err := rt.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
		}
		want := map[string]int{"list pods": 1, "list-page pods": 2}
		if !apart {
			want = map[string]int{"list pods": 3}
		}
		if got := c.ByName(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("ListPagesApart=%v: %v, want %v", apart, got, want)
		}
	}
}

// TestSyncBufferMaxAndTail: a bounded buffer keeps its last lines; Tail joins the last n.
func TestSyncBufferMaxAndTail(t *testing.T) {
	b := &SyncBuffer{Max: 64}
	for i := 0; i < 100; i++ {
		fmt.Fprintf(b, "line %d\n", i)
	}
	if n := len(b.String()); n > 64 {
		t.Errorf("kept %d bytes, want at most Max (64)", n)
	}
	if got := b.Tail(2); got != "line 98 | line 99" {
		t.Errorf("Tail(2) = %q", got)
	}
}

func TestListenersAreLoopbackOnly(t *testing.T) {
	c := Require(t, shared, sharedErr)
	for name, pid := range c.PIDs() {
		addrs, err := ListeningAddrs(pid)
		if err != nil {
			t.Fatalf("%s (pid %d): %v", name, pid, err)
		}
		t.Logf("%s pid %d listens on %v", name, pid, addrs)
		if name != "kube-controller-manager" && len(addrs) == 0 {
			t.Errorf("%s: no listeners found (is /proc readable?)", name)
		}
		for _, a := range addrs {
			if !IsLoopbackAddr(a) {
				t.Errorf("%s (pid %d) listens on %s, not loopback", name, pid, a)
			}
		}
	}
}

// TestAPIServerRestart uses its own cluster (Start) with an extra admission plugin.
func TestAPIServerRestart(t *testing.T) {
	c := Start(t, Options{ExtraAPIServerArgs: []string{"--enable-admission-plugins=OwnerReferencesPermissionEnforcement"}})
	ns := c.Namespace(t)
	cs := c.Client(t)
	ctx := context.Background()
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "survivor"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	host := c.Host
	pid := c.PIDs()["kube-apiserver"]
	start := time.Now()
	if err := c.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	t.Logf("apiserver stopped in %v", time.Since(start).Round(time.Millisecond))
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := cs.CoreV1().ConfigMaps(ns).Get(short, "survivor", metav1.GetOptions{}); err == nil {
		t.Fatal("apiserver still answering after StopAPIServer")
	}
	if err := c.StopAPIServer(); err == nil {
		t.Error("second StopAPIServer should fail")
	}
	start = time.Now()
	if err := c.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	t.Logf("apiserver restarted in %v", time.Since(start).Round(time.Millisecond))
	if c.Host != host || c.PIDs()["kube-apiserver"] == pid {
		t.Fatalf("restart: host %s→%s pid %d→%d", host, c.Host, pid, c.PIDs()["kube-apiserver"])
	}
	if _, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "survivor", metav1.GetOptions{}); err != nil {
		t.Fatalf("data lost across restart: %v", err)
	}
	// The controller-manager reconnects: garbage collection still works.
	assertGC(t, cs, ns, "after-restart")
}
