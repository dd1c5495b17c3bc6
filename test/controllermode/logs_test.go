package controllermode

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// With -log-format json every line the controller writes is one JSON object, client-go's own
// included (they reach its logger through klog, marked logger=client-go): here across a leader
// election (client-go's leaderelection logs "attempting to acquire leader lease" and
// "successfully acquired lease") and a namespace the identity may not read (the reflectors'
// list errors, which the controller's watch error handler logs), on the real apiserver.
func TestLogsAreJSONIncludingClientGo(t *testing.T) {
	t.Parallel()
	e := sharedEnv(t)
	ns := e.namespace(t)
	forbidden := e.c.Namespace(t) // no Role there: every list is refused
	rules := []rbacv1.PolicyRule{
		{APIGroups: []string{"apps"}, Resources: []string{"replicasets", "deployments", "statefulsets", "daemonsets"}, Verbs: []string{"list", "watch", "get"}},
		{APIGroups: []string{"apps"}, Resources: []string{"controllerrevisions"}, Verbs: []string{"list", "watch", "get", "create", "delete"}},
		{APIGroups: []string{"batch"}, Resources: []string{"jobs", "cronjobs"}, Verbs: []string{"list", "watch", "get"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "watch", "get"}},
		{APIGroups: []string{"argoproj.io"}, Resources: []string{"rollouts", "experiments"}, Verbs: []string{"list", "watch", "get"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps", "secrets"}, Verbs: []string{"list", "watch", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}},
	}
	cfg := e.c.ServiceAccountConfig(t, ns, "json-logs", rules, []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get"}},
	})
	p, err := cluster.LaunchController(e.bin, "json-"+ns, filepath.Join(e.c.Dir, "controller-json-"+ns+".log"), nil,
		"-kubeconfig", e.c.WriteKubeconfig(t, cfg), "-namespaces", ns+","+forbidden, "-selector", "test/json="+ns,
		"-workloads", "deployments", "-leader-elect", "-leader-election-namespace", ns, "-leader-election-id", "json-"+ns,
		"-log-format", "json")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("controller log:\n%s", p.LogTail(60))
		}
	})
	eventually(t, 30*time.Second, "client-go's leader election and reflector lines", func() (bool, string) {
		log := p.Log()
		for _, want := range []string{"attempting to acquire leader lease", "successfully acquired lease", "is forbidden"} {
			if !strings.Contains(log, want) {
				return false, "no " + want
			}
		}
		return true, ""
	})
	p.Stop()
	var klogLines, forbiddenLines, lines int
	for i, line := range strings.Split(strings.TrimRight(p.Log(), "\n"), "\n") {
		if strings.HasPrefix(line, "=== start ") {
			continue // the test harness's own marker, not the process's
		}
		lines++
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Errorf("line %d is not JSON (%v): %s", i+1, err, line)
			continue
		}
		if m["logger"] == "client-go" {
			klogLines++
		}
		if strings.Contains(fmt.Sprint(m), forbidden) && strings.Contains(fmt.Sprint(m), "is forbidden") {
			forbiddenLines++
		}
	}
	if klogLines < 2 || forbiddenLines == 0 {
		t.Errorf("%d lines from client-go (want the leader election's), %d about the forbidden namespace:\n%s", klogLines, forbiddenLines, p.LogTail(40))
	}
	t.Logf("%d lines, all JSON: %d from client-go, %d about the forbidden namespace", lines, klogLines, forbiddenLines)
}
