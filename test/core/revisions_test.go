package core

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
	"github.com/configmap-attacher/configmap-attacher/test/support/realapi"
)

// TestOldRevisionOfAStatefulSetBlocksTheStep: against the real apiserver (protobuf answers,
// a ControllerRevision's data as the StatefulSet controller writes it), a StatefulSet mid
// partitioned rollout whose Pod still runs revision 1, which mounts the ConfigMap, while its
// current template does not. The step no longer reads those Pods' specs: it reads the revisions, fails
// naming the old one, and writes nothing; its only Pod list is the metadata one.
func TestOldRevisionOfAStatefulSetBlocksTheStep(t *testing.T) {
	c := realapi.Shared(t)
	e := realapi.NewEnv(t, c)
	cfg := realapi.ControllerIdentity(t, c, e.NS, "rbac-step-plugin.yaml")
	spec := realapi.PodSpec([]string{"web-config"}, nil)
	e.ConfigMap("web-config")
	ro, roRS := e.SettledRollout(corev1.PodTemplateSpec{Spec: spec})

	// test/core runs no StatefulSet controller: its objects are written here as it writes them
	// (pkg/controller/statefulset, history.NewControllerRevision, getPatch): the set at
	// revision 2, which does not mount web-config; revision 1's ControllerRevision, which does;
	// Pod cache-0 still at revision 1 (a partition keeps it there).
	sts := e.StatefulSet("cache", realapi.PodSpec([]string{"cache-config"}, nil))
	ctl := []metav1.OwnerReference{*metav1.NewControllerRef(sts, appsv1.SchemeGroupVersion.WithKind("StatefulSet"))}
	for i, s := range []corev1.PodSpec{spec, sts.Spec.Template.Spec} {
		tmpl, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&corev1.PodTemplateSpec{ObjectMeta: sts.Spec.Template.ObjectMeta, Spec: s})
		if err != nil {
			t.Fatal(err)
		}
		tmpl["$patch"] = "replace"
		raw, err := json.Marshal(map[string]any{"spec": map[string]any{"template": tmpl}})
		if err != nil {
			t.Fatal(err)
		}
		cr := &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cache-rev%d", i+1), Labels: sts.Spec.Template.Labels, OwnerReferences: ctl},
			Data: runtime.RawExtension{Raw: raw}, Revision: int64(i + 1)}
		if _, err := e.Admin.AppsV1().ControllerRevisions(e.NS).Create(realapi.Ctx(t), cr, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "cache-0", OwnerReferences: ctl,
		Labels: map[string]string{"app": "cache", appsv1.ControllerRevisionHashLabelKey: "cache-rev1"}}, Spec: spec}
	if _, err := e.Admin.CoreV1().Pods(e.NS).Create(realapi.Ctx(t), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	counter := cluster.NewCounter()
	res := realapi.Run(t, realapi.NewStep(counter.Wrap(cfg)), ro, roRS.Labels[plugin.PodTemplateHashLabel], map[string]any{"configMaps": []string{"web-config"}})
	t.Logf("step: %s: %s (%s)", res.Phase, res.Message, counter)
	if res.Phase != types.PhaseFailed || !strings.Contains(res.Message, "ConfigMap web-config is also used by StatefulSet cache (revision cache-") ||
		!strings.Contains(res.Message, "nothing was written") {
		t.Errorf("step: %s: %s", res.Phase, res.Message)
	}
	if n := counter.Count("list", "pods"); n != 1 {
		t.Errorf("%d Pod lists, want 1 (metadata): the revisions stand for the StatefulSet's Pods", n)
	}
	if a := e.State("cm", "web-config"); len(a.Owners) != 0 {
		t.Errorf("the step wrote owners %v", a.Owners)
	}
}
