package chart

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// cleanupRules are exactly the calls `configmap-attacher cleanup` makes besides stopping the
// controller (plugin/cleanup): list and delete the anchors, get their workloads, the owners of
// their objects and the objects' metadata.
var cleanupRules = sortedUnion([]string{
	"apps/controllerrevisions:list", "apps/controllerrevisions:delete",
	"apps/deployments:get", "apps/statefulsets:get", "apps/daemonsets:get", "apps/replicasets:get", "apps/controllerrevisions:get",
	"batch/cronjobs:get", "batch/jobs:get", "argoproj.io/rollouts:get", "argoproj.io/experiments:get",
	"/configmaps:get", "/secrets:get", "/pods:get",
})

// hookOf returns o's helm.sh/hook annotations (hook, delete policy).
func hookOf(o obj) (string, string) {
	ann, _ := get(o, "metadata", "annotations").(map[string]any)
	h, _ := ann["helm.sh/hook"].(string)
	p, _ := ann["helm.sh/hook-delete-policy"].(string)
	return h, p
}

// jsonOf is o as one JSON document (kubectl takes JSON in a YAML stream).
func jsonOf(o obj) (string, error) {
	b, err := json.Marshal(o)
	if err != nil {
		return "", fmt.Errorf("%s: %w", o.key(), err)
	}
	return string(b), nil
}

func strs(v any) []string {
	var out []string
	l, _ := v.([]any)
	for _, x := range l {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

// TestCleanupHook: the uninstall cleanup as helm renders it (no pod runs here: the test control
// plane has no kubelet, and `helm uninstall` with hooks is not attempted). Defaults: a pre-delete
// Job running `cleanup -stop-controller=<ns>/<fullname>` as a ServiceAccount of its own whose
// ClusterRole is exactly cleanupRules and whose Role may only get and scale the release's
// Deployment; every object of it a hook; its pod not selected by the controller's Deployment.
// Per namespace: Roles in each watched namespace and -namespaces; force: -force; disabled:
// nothing rendered, and the admission policy names only the controller.
func TestCleanupHook(t *testing.T) {
	objs, _, err := render(t, "")
	if err != nil {
		t.Fatal(err)
	}
	const name = "rel-configmap-attacher-cleanup"
	job := find(objs, "Job", releaseNS, name)
	if job == nil {
		t.Fatalf("no Job %s/%s in %v", releaseNS, name, keys(objs))
	}
	var hooked []string
	for _, o := range objs {
		if h, p := hookOf(o); h == "pre-delete" {
			hooked = append(hooked, o.key())
			if !strings.Contains(p, "hook-succeeded") || !strings.Contains(p, "before-hook-creation") {
				t.Errorf("%s: hook-delete-policy %q", o.key(), p)
			}
		}
	}
	slices.Sort(hooked)
	wantHooked := []string{"ClusterRole /" + name, "ClusterRoleBinding /" + name, "Job " + releaseNS + "/" + name,
		"Role " + releaseNS + "/" + name + "-stop", "RoleBinding " + releaseNS + "/" + name + "-stop", "ServiceAccount " + releaseNS + "/" + name}
	if !slices.Equal(hooked, wantHooked) {
		t.Errorf("pre-delete hook objects %v, want %v", hooked, wantHooked)
	}
	pod := get(job, "spec", "template")
	args := strs(get(pod, "spec", "containers", 0, "args"))
	if want := []string{"cleanup", "-stop-controller=" + releaseNS + "/rel-configmap-attacher", "-stop-timeout=2m"}; !slices.Equal(args, want) {
		t.Errorf("the hook's args %q, want %q", args, want)
	}
	if get(pod, "spec", "serviceAccountName") != name || get(pod, "spec", "restartPolicy") != "Never" ||
		get(pod, "spec", "containers", 0, "securityContext", "readOnlyRootFilesystem") != true || get(job, "spec", "backoffLimit") != float64(1) {
		t.Errorf("the hook's pod: %v", pod)
	}
	d := find(objs, "Deployment", releaseNS, "rel-configmap-attacher")
	sel, _ := get(d, "spec", "selector", "matchLabels").(map[string]any)
	podLabels, _ := get(pod, "metadata", "labels").(map[string]any)
	selected := len(sel) > 0
	for k, v := range sel {
		selected = selected && podLabels[k] == v
	}
	if selected {
		t.Errorf("the controller's Deployment selects the hook's pod (labels %v, selector %v)", podLabels, sel)
	}
	if cr := find(objs, "ClusterRole", "", name); !slices.Equal(rules(cr), cleanupRules) {
		t.Errorf("the hook's ClusterRole rules %v, want %v", rules(cr), cleanupRules)
	}
	if b := find(objs, "ClusterRoleBinding", "", name); get(b, "subjects", 0, "name") != name || get(b, "subjects", 0, "namespace") != releaseNS || get(b, "roleRef", "name") != name {
		t.Errorf("the hook's ClusterRoleBinding %v", b)
	}
	stop := find(objs, "Role", releaseNS, name+"-stop")
	if want := []string{"apps/deployments/scale:patch", "apps/deployments:get"}; !slices.Equal(rules(stop), want) {
		t.Errorf("the stop Role's rules %v, want %v", rules(stop), want)
	}
	for i := range 2 {
		if rn := strs(get(stop, "rules", i, "resourceNames")); !slices.Equal(rn, []string{"rel-configmap-attacher"}) {
			t.Errorf("the stop Role's rule %d names %v, want only the release's Deployment", i, rn)
		}
	}

	objs, _, err = render(t, "rbac: {scope: namespaces}\nnamespaces: [cma-chart-a, cma-chart-b]\ncleanup: {force: true, stopTimeout: 30s}\n")
	if err != nil {
		t.Fatal(err)
	}
	if find(objs, "ClusterRole", "", name) != nil || find(objs, "ClusterRoleBinding", "", name) != nil {
		t.Errorf("per-namespace RBAC renders the hook's ClusterRole: %v", keys(objs))
	}
	for _, ns := range []string{"cma-chart-a", "cma-chart-b"} {
		if r := find(objs, "Role", ns, name); !slices.Equal(rules(r), cleanupRules) || find(objs, "RoleBinding", ns, name) == nil {
			t.Errorf("namespace %s: the hook's Role rules %v, want %v, and a RoleBinding", ns, rules(r), cleanupRules)
		}
	}
	args = strs(get(find(objs, "Job", releaseNS, name), "spec", "template", "spec", "containers", 0, "args"))
	if want := []string{"cleanup", "-stop-controller=" + releaseNS + "/rel-configmap-attacher", "-stop-timeout=30s", "-namespace=cma-chart-a,cma-chart-b", "-force"}; !slices.Equal(args, want) {
		t.Errorf("args %q, want %q", args, want)
	}

	// Disabled, or no RBAC from the chart (its hook would have none): no hook.
	for _, values := range []string{"cleanup: {enabled: false}\n", "serviceAccount: {create: false, name: preexisting}\nrbac: {create: false}\n"} {
		objs, _, err = render(t, values)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			if h, _ := hookOf(o); h == "pre-delete" || strings.Contains(o.meta("name"), "cleanup") {
				t.Errorf("%q renders %s", values, o.key())
			}
		}
		sa := "rel-configmap-attacher"
		if strings.Contains(values, "preexisting") {
			sa = "preexisting"
		}
		vap := find(objs, "ValidatingAdmissionPolicy", "", "rel-configmap-attacher-anchors-only")
		if got := get(vap, "spec", "matchConditions", 0, "expression"); got != "request.userInfo.username == 'system:serviceaccount:"+releaseNS+":"+sa+"'" {
			t.Errorf("%q: without the hook the policy matches %v", values, got)
		}
	}
}

// TestAdmissionPolicyRendered: on by default (helm's default capabilities serve
// admissionregistration.k8s.io/v1), it matches the controller's and the hook's ServiceAccounts,
// and admissionPolicy.enabled false renders neither object.
func TestAdmissionPolicyRendered(t *testing.T) {
	objs, _, err := render(t, "")
	if err != nil {
		t.Fatal(err)
	}
	const name = "rel-configmap-attacher-anchors-only"
	vap, binding := find(objs, "ValidatingAdmissionPolicy", "", name), find(objs, "ValidatingAdmissionPolicyBinding", "", name)
	if vap == nil || binding == nil {
		t.Fatalf("no policy and binding %s in %v", name, keys(objs))
	}
	want := "request.userInfo.username == 'system:serviceaccount:" + releaseNS + ":rel-configmap-attacher' || request.userInfo.username == 'system:serviceaccount:" + releaseNS + ":rel-configmap-attacher-cleanup'"
	if got := get(vap, "spec", "matchConditions", 0, "expression"); got != want {
		t.Errorf("matchConditions %v, want %s", got, want)
	}
	if get(vap, "spec", "failurePolicy") != "Fail" || get(binding, "spec", "policyName") != name || !slices.Equal(strs(get(binding, "spec", "validationActions")), []string{"Deny"}) {
		t.Errorf("policy %v binding %v", vap, binding)
	}
	objs, _, err = render(t, "admissionPolicy: {enabled: false}\n")
	if err != nil {
		t.Fatal(err)
	}
	if find(objs, "ValidatingAdmissionPolicy", "", name) != nil || find(objs, "ValidatingAdmissionPolicyBinding", "", name) != nil {
		t.Errorf("admissionPolicy.enabled false renders the policy: %v", keys(objs))
	}
}

// TestAdmissionPolicyOnAPIServer: the rendered policy and binding, with the controller's
// ServiceAccount and ClusterRole, applied to the real kube-apiserver (v1.34: the API is GA and
// on). As the controller's ServiceAccount (impersonated), deleting an unlabelled
// ControllerRevision is denied by the policy (the error names it) although RBAC grants delete,
// creating an unlabelled one is denied, and creating and deleting a labelled anchor is allowed;
// the administrator is not matched. CMA_PLANT=vap-inverted applies the policy with its delete
// rule inverted: the test must fail.
func TestAdmissionPolicyOnAPIServer(t *testing.T) {
	c := cluster.Require(t, shared, sharedErr)
	const release, ns = "vap", "cma-vap"
	if _, err := kubectl(c, []byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: "+ns+"}\n"), "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	objs, _, err := renderRelease(t, release, ns, "")
	if err != nil {
		t.Fatal(err)
	}
	const name = release + "-configmap-attacher-anchors-only"
	var docs []string
	for _, k := range []string{"ServiceAccount " + ns + "/" + release + "-configmap-attacher", "ClusterRole /" + release + "-configmap-attacher",
		"ClusterRoleBinding /" + release + "-configmap-attacher", "ValidatingAdmissionPolicy /" + name, "ValidatingAdmissionPolicyBinding /" + name} {
		i := slices.IndexFunc(objs, func(o obj) bool { return o.key() == k })
		if i < 0 {
			t.Fatalf("no %s in %v", k, keys(objs))
		}
		b, err := jsonOf(objs[i])
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, b)
	}
	manifest := strings.Join(docs, "\n---\n")
	if os.Getenv("CMA_PLANT") == "vap-inverted" {
		manifest = strings.Replace(manifest, `request.operation != 'DELETE' || (`, `request.operation != 'DELETE' || !(`, 1)
	}
	if _, err := kubectl(c, []byte(manifest), "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, k := range []string{"validatingadmissionpolicybinding/" + name, "validatingadmissionpolicy/" + name,
			"clusterrolebinding/" + release + "-configmap-attacher", "clusterrole/" + release + "-configmap-attacher"} {
			_, _ = kubectl(c, nil, "delete", "--ignore-not-found", k)
		}
	})

	admin := c.Client(t)
	cfg := rest.CopyConfig(c.AdminConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":" + release + "-configmap-attacher",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}}
	sa, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	app := c.Namespace(t)
	revision := func(name string, labels map[string]string) *appsv1.ControllerRevision {
		return &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: app, Labels: labels},
			Data: runtime.RawExtension{Raw: []byte(`{"workload":"Deployment/web","references":["ConfigMap/web-1"]}`)}, Revision: 1}
	}
	ctx := func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		t.Cleanup(cancel)
		return ctx
	}
	anchorLabels := map[string]string{"configmap-attacher.io/anchor": "true"}

	// A StatefulSet's revision, by the administrator (not matched): then, as the controller,
	// its delete is denied. Policies reach admission through an informer: retry until denied.
	if _, err := admin.AppsV1().ControllerRevisions(app).Create(ctx(), revision("db-5d8f", nil), metav1.CreateOptions{}); err != nil {
		t.Fatalf("the administrator creating an unlabelled ControllerRevision: %v", err)
	}
	var denied error
	start := time.Now()
	wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cluster.WaitUntil(t, wctx, 200*time.Millisecond, "the policy denies the controller deleting an unlabelled ControllerRevision", func() (bool, string) {
		// A dry run: the delete is admitted (or not) but never happens. Until RBAC and the
		// policy reach the apiserver's informers, it is allowed or denied by RBAC.
		err := sa.AppsV1().ControllerRevisions(app).Delete(ctx(), "db-5d8f", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		denied = err
		return err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy"), fmt.Sprintf("delete answered %v", err)
	})
	t.Logf("the policy denied the delete %v after it was applied", time.Since(start).Round(time.Millisecond))
	if !apierrors.IsForbidden(denied) || !strings.Contains(denied.Error(), "ValidatingAdmissionPolicy '"+name+"'") ||
		!strings.Contains(denied.Error(), "configmap-attacher may delete only its anchors") {
		t.Errorf("the denial %q does not name the policy and its message", denied)
	}
	if err := sa.AppsV1().ControllerRevisions(app).Delete(ctx(), "db-5d8f", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the controller deleting an unlabelled ControllerRevision: %v, want forbidden by the policy", err)
	}
	if _, err := admin.AppsV1().ControllerRevisions(app).Get(ctx(), "db-5d8f", metav1.GetOptions{}); err != nil {
		t.Errorf("the unlabelled ControllerRevision: %v", err)
	}
	// A label with another value is no anchor either (plugin.IsAnchor wants "true").
	if _, err := admin.AppsV1().ControllerRevisions(app).Create(ctx(), revision("odd", map[string]string{"configmap-attacher.io/anchor": "false"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := sa.AppsV1().ControllerRevisions(app).Delete(ctx(), "odd", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the controller deleting a ControllerRevision labelled anchor=false: %v, want forbidden", err)
	}

	// Create: unlabelled denied, an anchor allowed; deleting the anchor allowed.
	if _, err := sa.AppsV1().ControllerRevisions(app).Create(ctx(), revision("web-unlabelled", nil), metav1.CreateOptions{}); !apierrors.IsForbidden(err) ||
		!strings.Contains(err.Error(), "may create and update only its anchors") {
		t.Errorf("the controller creating an unlabelled ControllerRevision: %v, want forbidden by the policy", err)
	}
	a, err := sa.AppsV1().ControllerRevisions(app).Create(ctx(), revision("web-cma-deployment-0123456789", anchorLabels), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the controller creating a labelled anchor: %v", err)
	}
	uid := a.UID
	if err := sa.AppsV1().ControllerRevisions(app).Delete(ctx(), a.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil {
		t.Errorf("the controller deleting its labelled anchor: %v", err)
	}
	// The administrator is not matched.
	if err := admin.AppsV1().ControllerRevisions(app).Delete(ctx(), "db-5d8f", metav1.DeleteOptions{}); err != nil {
		t.Errorf("the administrator deleting an unlabelled ControllerRevision: %v", err)
	}
}

// TestCleanupHookRunsWithItsRBAC: the hook's ServiceAccount, ClusterRole, Role and bindings as
// helm renders them, and the admission policy, applied to the real kube-apiserver; the built
// binary then runs with exactly the Job's args and a token of the hook's ServiceAccount (no pod
// runs here). It scales the release's Deployment to 0, deletes the anchor of a gone workload
// (the garbage collector then collects its ConfigMap) and leaves an unlabelled
// ControllerRevision alone: the rendered RBAC is enough, and the policy lets it through.
func TestCleanupHookRunsWithItsRBAC(t *testing.T) {
	c := cluster.Require(t, shared, sharedErr)
	bin, err := cluster.PluginBinary()
	if err != nil {
		t.Fatal(err)
	}
	const release, ns = "hk", "cma-hook"
	full, hookName := release+"-configmap-attacher", release+"-configmap-attacher-cleanup"
	if _, err := kubectl(c, []byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: "+ns+"}\n"), "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	objs, _, err := renderRelease(t, release, ns, "")
	if err != nil {
		t.Fatal(err)
	}
	var docs []string
	var job obj
	for _, o := range objs {
		h, _ := hookOf(o)
		switch {
		case o.kind() == "Job" && h == "pre-delete":
			job = o
			continue
		case h == "pre-delete", strings.HasPrefix(o.kind(), "ValidatingAdmissionPolicy"):
		default:
			continue
		}
		b, err := jsonOf(o)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, b)
	}
	if job == nil || len(docs) != 7 {
		t.Fatalf("rendered hook: Job %v and %d other objects (want the ServiceAccount, ClusterRole, ClusterRoleBinding, Role, RoleBinding, policy and binding)", job != nil, len(docs))
	}
	manifest := strings.Join(docs, "\n---\n")
	if os.Getenv("CMA_PLANT") == "hook-rbac" {
		// The hook without get on Jobs: an owner it must check.
		manifest = strings.Replace(manifest, `"resources":["cronjobs","jobs"]`, `"resources":["cronjobs"]`, 1)
	}
	if _, err := kubectl(c, []byte(manifest), "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, k := range []string{"validatingadmissionpolicybinding/" + full + "-anchors-only", "validatingadmissionpolicy/" + full + "-anchors-only",
			"clusterrolebinding/" + hookName, "clusterrole/" + hookName} {
			_, _ = kubectl(c, nil, "delete", "--ignore-not-found", k)
		}
	})
	cs := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// The release's controller Deployment (its pod stays Pending: nothing schedules it here).
	one := int32(1)
	l := map[string]string{"app": full}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: full, Namespace: ns}, Spec: appsv1.DeploymentSpec{Replicas: &one,
		Selector: &metav1.LabelSelector{MatchLabels: l}, Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: l},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "controller", Image: "registry.invalid/cma:1"}}}}}}
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// An application namespace: the anchor of a Deployment that is gone, the ConfigMap only it
	// owns, and a StatefulSet's revision (no label).
	app := c.Namespace(t)
	appNS, err := cs.CoreV1().Namespaces().Get(ctx, app, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	anchor := plugin.NewAnchor("Deployment", "web", []plugin.Object{{Kind: plugin.KindConfigMap, Name: "web-1"}}).ControllerRevision(app, appNS.UID)
	if anchor, err = cs.AppsV1().ControllerRevisions(app).Create(ctx, anchor, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: app, OwnerReferences: []metav1.OwnerReference{
		{APIVersion: "apps/v1", Kind: "ControllerRevision", Name: anchor.Name, UID: anchor.UID}}}, Data: map[string]string{"k": "v"}}
	if _, err := cs.CoreV1().ConfigMaps(app).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.AppsV1().ControllerRevisions(app).Create(ctx, &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: "db-5d8f", Namespace: app},
		Data: runtime.RawExtension{Raw: []byte(`{}`)}, Revision: 1}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A live CronJob whose anchor owns nightly-1 beside a Job of it: not the last keeper.
	cj := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: app}, Spec: batchv1.CronJobSpec{Schedule: "0 0 1 1 *",
		JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "job", Image: "registry.invalid/job:1", EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "nightly-1"}}}}}}}}}}}}
	if _, err := cs.BatchV1().CronJobs(app).Create(ctx, cj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	job1, err := cs.BatchV1().Jobs(app).Create(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "nightly-1234", Namespace: app},
		Spec: batchv1.JobSpec{Suspend: ptrTrue(), Template: cj.Spec.JobTemplate.Spec.Template}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cjAnchor := plugin.NewAnchor("CronJob", "nightly", []plugin.Object{{Kind: plugin.KindConfigMap, Name: "nightly-1"}}).ControllerRevision(app, appNS.UID)
	if cjAnchor, err = cs.AppsV1().ControllerRevisions(app).Create(ctx, cjAnchor, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps(app).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "nightly-1", Namespace: app,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ControllerRevision", Name: cjAnchor.Name, UID: cjAnchor.UID},
			{APIVersion: "batch/v1", Kind: "Job", Name: job1.Name, UID: job1.UID}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cluster.WaitUntil(t, ctx, 100*time.Millisecond, "the controller Deployment's pod exists", func() (bool, string) {
		d, err := cs.AppsV1().Deployments(ns).Get(ctx, full, metav1.GetOptions{})
		return err == nil && d.Status.Replicas == 1, fmt.Sprintf("%v", err)
	})

	// Exactly the Job's args, as the hook's ServiceAccount.
	kubeconfig, err := cluster.ServiceAccountKubeconfig(ctx, c, cs, ns, hookName, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	args := append(strs(get(job, "spec", "template", "spec", "containers", 0, "args")), "-kubeconfig", kubeconfig)
	var out []byte
	start := time.Now()
	// RBAC reaches the authorizer through informers: a 403 right after the apply is retried, as
	// the Job's backoffLimit does.
	rctx, rcancel := context.WithTimeout(ctx, 40*time.Second)
	defer rcancel()
	cluster.WaitUntil(t, rctx, time.Second, "cleanup as the hook's ServiceAccount exits 0", func() (bool, string) {
		out, err = exec.CommandContext(ctx, bin, args...).CombinedOutput()
		return err == nil, fmt.Sprintf("%v\n%s", err, out)
	})
	t.Logf("%s (%v):\n%s", strings.Join(args[:len(args)-2], " "), time.Since(start).Round(time.Millisecond), out)
	if !strings.Contains(string(out), "stopped the controller: Deployment "+ns+"/"+full+" scaled to 0") ||
		!strings.Contains(string(out), "DELETED      anchor "+app+"/"+anchor.Name) || !strings.Contains(string(out), "DELETED      anchor "+app+"/"+cjAnchor.Name) {
		t.Errorf("cleanup output:\n%s", out)
	}
	if d, err := cs.AppsV1().Deployments(ns).Get(ctx, full, metav1.GetOptions{}); err != nil || *d.Spec.Replicas != 0 {
		t.Errorf("the controller's Deployment: %v, replicas %v, want 0", err, d.Spec.Replicas)
	}
	if _, err := cs.AppsV1().ControllerRevisions(app).Get(ctx, anchor.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the anchor after cleanup: %v, want not found", err)
	}
	if _, err := cs.AppsV1().ControllerRevisions(app).Get(ctx, "db-5d8f", metav1.GetOptions{}); err != nil {
		t.Errorf("the StatefulSet's revision after cleanup: %v", err)
	}
	cluster.WaitUntil(t, ctx, 100*time.Millisecond, "the garbage collector deletes web-1", func() (bool, string) {
		_, err := cs.CoreV1().ConfigMaps(app).Get(ctx, "web-1", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprintf("%v", err)
	})
	if _, err := cs.CoreV1().ConfigMaps(app).Get(ctx, "nightly-1", metav1.GetOptions{}); err != nil {
		t.Errorf("nightly-1, which a Job of the CronJob owns: %v", err)
	}
}

func ptrTrue() *bool { b := true; return &b }
