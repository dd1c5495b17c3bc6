package controllermode

import (
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// Uninstall: `configmap-attacher cleanup` after the controller is stopped. A Deployment's
// anchor outlives its workload by -anchor-grace (here longer than the test), so once the
// controller is gone only cleanup deletes it; the real garbage collector then collects the
// config. A CronJob's anchor is the last keeper of its current config between runs: cleanup
// refuses (deleting nothing) and prints the command that keeps the object; after that command
// and -force, every anchor is gone and nothing is left that can never be collected.
//
// It runs on a cluster of its own: the shared controller would delete the Deployment's anchor
// itself after its short grace, and the uninstall is of the only controller there is.
func TestCleanupAfterUninstall(t *testing.T) {
	t.Parallel()
	shared := sharedEnv(t) // the binary, and the components are there (or skip)
	c := cluster.Start(t, cluster.Options{})
	e := &env{c: c, bin: shared.bin}
	kube := c.Client(t)
	ictx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kubeconfig, err := cluster.ControllerModeIdentity(ictx, c, kube)
	if err != nil {
		t.Fatal(err)
	}
	ns := c.Namespace(t)
	l := map[string]string{cluster.LabelRevisioned: "true"}
	args := []string{"-kubeconfig", kubeconfig, "-leader-elect=false", "-log-level", "debug", "-anchor-grace", "10m"}
	ctl, err := startController(c.Dir, e.bin, "cleanup", args...)
	t.Cleanup(func() { ctl.Stop() }) // nil-safe
	if err != nil {
		t.Fatal(err)
	}
	cluster.LogLinesOnFailure(t, "controller cleanup", ctl.LogPath, ctl.Log, ns, 80)

	web, nightly, weekly := cluster.ConfigMapRef("web-1"), cluster.ConfigMapRef("nightly-1"), cluster.ConfigMapRef("weekly-1")
	for _, r := range []cluster.ConfigRef{web, nightly, weekly} {
		createConfig(t, kube, ns, r.Name, "", l)
	}
	rs := waitDeploymentOf(t, kube, ns, "web", web)
	webAnchor := waitAnchor(t, kube, ns, "Deployment/web", 30*time.Second, web)
	for _, cj := range []struct {
		name string
		cm   cluster.ConfigRef
	}{{"nightly", nightly}, {"weekly", weekly}} {
		obj := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: cj.name, Namespace: ns},
			Spec: batchv1.CronJobSpec{Schedule: "0 0 1 1 *", JobTemplate: batchv1.JobTemplateSpec{
				Spec: batchv1.JobSpec{Template: tpl(cj.name, runOnce(cj.cm.Name, ""))}}}}
		if _, err := kube.BatchV1().CronJobs(ns).Create(ctxT(t), obj, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	nightlyAnchor := waitAnchor(t, kube, ns, "CronJob/nightly", 30*time.Second, nightly)
	weeklyAnchor := waitAnchor(t, kube, ns, "CronJob/weekly", 30*time.Second, weekly)

	// The Deployment is deleted; its anchor keeps web-1 (the grace has not passed).
	if err := kube.AppsV1().Deployments(ns).Delete(ctxT(t), "web", deleteWith(background)); err != nil {
		t.Fatal(err)
	}
	waitReplicaSetsGone(t, kube, ns, 60*time.Second, map[types.UID]string{rs.UID: rs.Name})
	stillThere(t, kube, ns, time.Second, "its anchor keeps it for the grace", []owner{crOwner(webAnchor)}, web)

	// Uninstalled: the controller stops, its anchors stay.
	ctl.Stop()

	// 1. Refused: the CronJobs' anchors are the last keepers of their config; nothing deleted.
	start := time.Now()
	code, out := runCleanup(t, e, "-namespaces", ns, "-o", "json")
	t.Logf("cleanup (refused) took %v", time.Since(start).Round(time.Millisecond))
	if code != 1 {
		t.Fatalf("cleanup with needed anchors: exit %d, want 1\n%s", code, out)
	}
	var rep struct {
		Anchors []struct {
			Name, Action, Workload string
			Needs                  []struct {
				Kind, Name, Command string
				Users               []string
			}
		}
		Note string
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("cleanup -o json: %v\n%s", err, out)
	}
	commands := map[string]string{}
	for _, a := range rep.Anchors {
		switch a.Workload {
		case "Deployment/web":
			if a.Action != "would delete" {
				t.Errorf("the gone Deployment's anchor: %s, want would delete (nothing is deleted while another is needed)", a.Action)
			}
		case "CronJob/nightly", "CronJob/weekly":
			if a.Action != "kept" || len(a.Needs) != 1 || a.Needs[0].Kind != "ConfigMap" || len(a.Needs[0].Users) != 1 || a.Needs[0].Users[0] != a.Workload {
				t.Errorf("anchor of %s: %+v, want kept, naming its ConfigMap and the CronJob", a.Workload, a)
				continue
			}
			commands[a.Needs[0].Name] = a.Needs[0].Command
		default:
			t.Errorf("unexpected anchor %+v", a)
		}
	}
	if rep.Note == "" || len(commands) != 2 {
		t.Fatalf("report without the note or the commands:\n%s", out)
	}
	for _, a := range []*struct {
		cr  string
		uid types.UID
	}{{webAnchor.Name, webAnchor.UID}, {nightlyAnchor.Name, nightlyAnchor.UID}, {weeklyAnchor.Name, weeklyAnchor.UID}} {
		if cur := getRevision(t, kube, ns, a.cr); cur == nil || cur.UID != a.uid {
			t.Errorf("anchor %s deleted by a refused cleanup", a.cr)
		}
	}
	stillThere(t, kube, ns, time.Second, "a refused cleanup changes nothing", nil, web, nightly, weekly)

	// 2. The printed command keeps weekly-1 (no owner any more); nightly's anchor is still needed.
	sh := exec.Command("sh", "-c", strings.Replace(commands[weekly.Name], "kubectl ", filepath.Join(e.c.BinDir, "kubectl")+" --kubeconfig "+e.c.KubeconfigPath+" ", 1))
	if b, err := sh.CombinedOutput(); err != nil {
		t.Fatalf("the printed command %q: %v\n%s", commands[weekly.Name], err, b)
	}
	if code, out := runCleanup(t, e, "-namespaces", ns); code != 1 || !strings.Contains(out, "ConfigMap nightly-1 is used by CronJob/nightly") || strings.Contains(out, "weekly-1 is used") {
		t.Fatalf("cleanup after keeping weekly-1: exit %d\n%s", code, out)
	}

	// 3. -force: every anchor goes; the garbage collector collects web-1 and nightly-1.
	start = time.Now()
	if code, out := runCleanup(t, e, "-namespaces", ns, "-force"); code != 0 || strings.Count(out, "DELETED") != 3 {
		t.Fatalf("cleanup -force: exit %d, want 0 and 3 anchors deleted\n%s", code, out)
	} else {
		t.Logf("cleanup -force took %v:\n%s", time.Since(start).Round(time.Millisecond), out)
	}
	if left := anchorsIn(t, kube, ns); len(left) != 0 {
		t.Errorf("anchors left after cleanup: %v", left)
	}
	start = time.Now()
	waitGone(t, kube, ns, web, nightly)
	t.Logf("the garbage collector collected web-1 and nightly-1 %v after cleanup", time.Since(start).Round(time.Millisecond))
	stillThere(t, kube, ns, 2*time.Second, "its owner reference was removed: it is kept until deleted by hand", nil, weekly)
	if m := getMeta(t, kube, ns, weekly); len(m.OwnerReferences) != 0 {
		t.Errorf("weekly-1 still has owners %v", ownerNames(m.OwnerReferences))
	}
	// Again: nothing left to do.
	if code, out := runCleanup(t, e, "-namespaces", ns); code != 0 || !strings.Contains(out, "no anchors") {
		t.Errorf("cleanup again: exit %d\n%s", code, out)
	}
}

// waitDeploymentOf creates Deployment name (0 replicas) using ConfigMap cm and waits for its
// ReplicaSet to own it.
func waitDeploymentOf(t *testing.T, kube kubernetes.Interface, ns, name string, cm cluster.ConfigRef) *appsv1.ReplicaSet {
	t.Helper()
	d := deploymentObject(ns, name, 0, nil, podSpec(cm.Name, ""))
	if _, err := kube.AppsV1().Deployments(ns).Create(ctxT(t), d, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Deployment %s: %v", name, err)
	}
	rs := waitDeployment(t, kube, ns, name, cm.Name, usesConfigMap(cm.Name))
	waitOwnedBy(t, kube, ns, rsOwner(rs), 30*time.Second, cm)
	return rs
}

// anchorsIn lists the names of the anchors in ns.
func anchorsIn(t *testing.T, kube kubernetes.Interface, ns string) []string {
	t.Helper()
	list, err := kube.AppsV1().ControllerRevisions(ns).List(ctxT(t), metav1.ListOptions{LabelSelector: labelAnchor + "=true"})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, cr := range list.Items {
		out = append(out, cr.Name)
	}
	return out
}

// runCleanup runs `configmap-attacher cleanup args...` as the cluster's administrator (the
// identity of an uninstall) and returns its exit code and stdout (stderr is logged).
func runCleanup(t *testing.T, e *env, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(e.bin, append([]string{"cleanup", "-kubeconfig", e.c.KubeconfigPath}, args...)...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if stderr.Len() > 0 {
		t.Logf("cleanup %v stderr:\n%s", args, stderr.String())
	}
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, stdout.String()
	case errors.As(err, &exit):
		return exit.ExitCode(), stdout.String()
	}
	t.Fatalf("cleanup %v: %v", args, err)
	return -1, ""
}
