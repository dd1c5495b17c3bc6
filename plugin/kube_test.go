package plugin

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// TestNewKubeRequests: each method of the REST Kube sends the request the typed clientset
// sends (method, path, query) and decodes the answer into its type. The real apiserver tests
// (test/core, test/rollouts) run it end to end; this pins the paths without one.
func TestNewKubeRequests(t *testing.T) {
	var mu sync.Mutex
	var got, accepts []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
		if r.Method == http.MethodGet {
			accepts = append(accepts, r.Header.Get("Accept"))
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodPost {
			_, _ = w.Write(body) // the Event as created
			return
		}
		parts := strings.Split(r.URL.Path, "/")
		resource := parts[len(parts)-1]
		gv := "v1"
		if strings.HasPrefix(r.URL.Path, "/apis/") {
			gv = parts[2] + "/" + parts[3]
		}
		if len(parts) == 8 && parts[6] == "replicasets" { // GET of one: /apis/apps/v1/namespaces/ns/replicasets/NAME
			_ = json.NewEncoder(w).Encode(map[string]any{"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": map[string]any{"name": parts[7], "namespace": "ns"}})
			return
		}
		kind := map[string]string{"replicasets": "ReplicaSetList", "statefulsets": "StatefulSetList", "daemonsets": "DaemonSetList",
			"jobs": "JobList", "cronjobs": "CronJobList", "pods": "PodList", "controllerrevisions": "ControllerRevisionList"}[resource]
		_ = json.NewEncoder(w).Encode(map[string]any{"apiVersion": gv, "kind": kind, "metadata": map[string]any{"resourceVersion": "7"},
			"items": []any{map[string]any{"metadata": map[string]any{"name": resource + "-1", "namespace": "ns"}}}})
	}))
	defer srv.Close()
	k, err := NewKube(&rest.Config{Host: srv.URL, QPS: 100, Burst: 100}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sel := metav1.ListOptions{FieldSelector: "metadata.name=x"}
	names := map[string]string{}
	check := func(what string, name string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
		names[what] = name
	}
	rs, err := k.ListReplicaSets(ctx, "ns", sel)
	check("replicasets", first(rs.Items, func(i int) string { return rs.Items[i].Name }), err)
	ss, err := k.ListStatefulSets(ctx, "ns", metav1.ListOptions{})
	check("statefulsets", first(ss.Items, func(i int) string { return ss.Items[i].Name }), err)
	ds, err := k.ListDaemonSets(ctx, "ns", metav1.ListOptions{})
	check("daemonsets", first(ds.Items, func(i int) string { return ds.Items[i].Name }), err)
	js, err := k.ListJobs(ctx, "ns", metav1.ListOptions{})
	check("jobs", first(js.Items, func(i int) string { return js.Items[i].Name }), err)
	cj, err := k.ListCronJobs(ctx, "ns", metav1.ListOptions{})
	check("cronjobs", first(cj.Items, func(i int) string { return cj.Items[i].Name }), err)
	ps, err := k.ListPods(ctx, "ns", sel)
	check("pods", first(ps.Items, func(i int) string { return ps.Items[i].Name }), err)
	cr, err := k.ListControllerRevisions(ctx, "ns", metav1.ListOptions{Limit: 500})
	check("controllerrevisions", first(cr.Items, func(i int) string { return cr.Items[i].Name }), err)
	one, err := k.GetReplicaSet(ctx, "ns", "web-1")
	if err != nil || one.Name != "web-1" {
		t.Errorf("GetReplicaSet = %+v, %v", one, err)
	}
	ev, err := k.CreateEvent(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "web.1", Namespace: "ns"}, Reason: "Attached"})
	if err != nil || ev.Name != "web.1" || ev.Reason != "Attached" {
		t.Errorf("CreateEvent = %+v, %v", ev, err)
	}
	for r, n := range names {
		if n != r+"-1" {
			t.Errorf("%s: decoded item %q, want %q", r, n, r+"-1")
		}
	}
	want := []string{
		"GET /apis/apps/v1/namespaces/ns/replicasets?fieldSelector=metadata.name%3Dx",
		"GET /apis/apps/v1/namespaces/ns/statefulsets?",
		"GET /apis/apps/v1/namespaces/ns/daemonsets?",
		"GET /apis/batch/v1/namespaces/ns/jobs?",
		"GET /apis/batch/v1/namespaces/ns/cronjobs?",
		"GET /api/v1/namespaces/ns/pods?fieldSelector=metadata.name%3Dx",
		"GET /apis/apps/v1/namespaces/ns/controllerrevisions?limit=500",
		"GET /apis/apps/v1/namespaces/ns/replicasets/web-1?",
		"POST /api/v1/namespaces/ns/events?",
	}
	// Protobuf first: a busy namespace's lists are smaller and cheaper to decode.
	for _, a := range accepts {
		if !strings.HasPrefix(a, "application/vnd.kubernetes.protobuf") {
			t.Errorf("Accept %q: want protobuf first", a)
		}
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("requests\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func first[T any](items []T, name func(int) string) string {
	if len(items) == 0 {
		return ""
	}
	return name(0)
}
