package audit

import (
	"bytes"
	"encoding/json"
	"sort"
	"strings"
	"testing"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	rolloutsclient "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned"
	rolloutsfake "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned/fake"
	"github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/plugin/clientset"
	"github.com/configmap-attacher/configmap-attacher/test/support/fakemeta"
	"github.com/configmap-attacher/configmap-attacher/test/support/fixtures"
)

const (
	testNS = fixtures.Namespace
	optIn  = plugin.OptInLabel
	// The command's exit codes (plugin/cmd): Report.Failed is exit 1.
	exitOK   = 0
	exitFail = 1
)

// clientsOf serves the typed and the metadata client from one typed fake.
func clientsOf(c kubernetes.Interface, ro rolloutsclient.Interface) clientset.Clients {
	return clientset.Clients{Kube: c, Meta: fakemeta.WithRollouts(c, ro), Rollouts: ro}
}

func owners(t *testing.T, c kubernetes.Interface, kind plugin.Kind, name string) []metav1.OwnerReference {
	t.Helper()
	if kind == plugin.KindSecret {
		s, err := c.CoreV1().Secrets(testNS).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s.OwnerReferences
	}
	cm, err := c.CoreV1().ConfigMaps(testNS).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cm.OwnerReferences
}

func rsRef(rs *appsv1.ReplicaSet, controller bool) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: &controller}
}

// auditRS is a ReplicaSet of the test Rollout with a revision annotation.
func auditRS(hash string, rev string, spec corev1.PodSpec) *appsv1.ReplicaSet {
	rs := fixtures.ReplicaSet(hash, types.UID("uid-"+hash), fixtures.RolloutUID, spec)
	rs.Annotations = map[string]string{plugin.RevisionAnnotation: rev}
	return rs
}

// cm is a ConfigMap with data; opted in when optedIn.
func cm(name string, optedIn bool, owners ...metav1.OwnerReference) *corev1.ConfigMap {
	c := fixtures.ConfigMap(name, owners...)
	if optedIn {
		c.Labels[optIn] = "true"
	}
	return c
}

func withSteps(ro *v1alpha1.Rollout, configs ...string) *v1alpha1.Rollout {
	steps := []v1alpha1.CanaryStep{}
	for _, c := range configs {
		steps = append(steps, v1alpha1.CanaryStep{Plugin: &v1alpha1.PluginStep{Name: "configmap-attacher/configmap-attacher", Config: json.RawMessage(c)}})
	}
	steps = append(steps, v1alpha1.CanaryStep{SetWeight: ptr(int32(20))},
		// Another plugin's step naming an object is not ours.
		v1alpha1.CanaryStep{Plugin: &v1alpha1.PluginStep{Name: "acme/other", Config: json.RawMessage(`{"configMaps":["static"]}`)}})
	ro.Spec.Strategy.Canary = &v1alpha1.CanaryStrategy{Steps: steps}
	return ro
}

func ptr[T any](v T) *T { return &v }

// ownerSet returns "name:controller" of each owner reference, sorted.
func ownerSet(refs []metav1.OwnerReference) string {
	var s []string
	for _, r := range refs {
		c := "false"
		if r.Controller != nil && *r.Controller {
			c = "true"
		}
		s = append(s, r.Name+":"+c)
	}
	sort.Strings(s)
	return strings.Join(s, ",")
}

// auditScenario has every finding:
//   - web-rev3 (current): cfg-3 (opted in, unowned: missing owner, fixable), sec-3 (named in
//     the step, owned), static (not opted in, no owner), cfg-legacy-ok (controller: true on
//     web-rev3 itself: legacy)
//   - web-rev2: cfg-2 (opted in, controller: true on web-rev1, the wrong one: legacy, and
//     missing owner web-rev2, fixable), static, cfg-opt (optional, absent)
//   - web-rev1: cfg-1 (does not exist: lost), shared (not opted in, owned by web-rev2 which
//     does not use it: stray; missing owner web-rev1, not fixable)
//   - cfg-stray: opted in, owned by web-rev3 and web-rev2, used by neither: two strays
//   - cfg-named: named in the step, not used, no owner: unowned
//   - orphan: opted in, used and owned by nothing: unowned (unattributed)
//   - an impostor ReplicaSet with the Rollout's labels but another controller, using cfg-x
func auditScenario() (*fake.Clientset, *rolloutsfake.Clientset) {
	rev3 := auditRS("rev3", "3", fixtures.PodSpec([]string{"cfg-3", "static", "cfg-legacy-ok"}, []string{"sec-3"}))
	rev2 := auditRS("rev2", "2", fixtures.PodSpec([]string{"cfg-2", "static"}, nil))
	rev2.Spec.Template.Spec.Volumes = append(rev2.Spec.Template.Spec.Volumes, corev1.Volume{Name: "opt", VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg-opt"}, Optional: ptr(true)}}})
	rev1 := auditRS("rev1", "1", fixtures.PodSpec([]string{"cfg-1", "shared"}, nil))
	impostor := fixtures.ReplicaSet("imp", "uid-imp", "someone-else", fixtures.PodSpec([]string{"cfg-x"}, nil))
	sec3 := fixtures.Secret("sec-3")
	sec3.OwnerReferences = []metav1.OwnerReference{rsRef(rev3, false)}
	kube := fake.NewClientset(rev3, rev2, rev1, impostor,
		cm("cfg-3", true), sec3, cm("static", false), cm("cfg-legacy-ok", true, rsRef(rev3, true)),
		cm("cfg-2", true, rsRef(rev1, true)),
		cm("shared", false, rsRef(rev2, false)),
		cm("cfg-stray", true, rsRef(rev3, false), rsRef(rev2, false)),
		cm("cfg-named", false), cm("orphan", true), cm("cfg-x", false))
	ro := withSteps(fixtures.Rollout("rev3"), `{"configMaps":["cfg-named"],"secrets":["sec-3"]}`, `{"configmaps":["ignored-bad-config"]}`)
	return kube, rolloutsfake.NewSimpleClientset(ro)
}

// run is one audit as `configmap-attacher audit` makes it (the flags, parsed).
type run struct {
	namespace, rollout string
	fix, json          bool
	selector           string
	workloads          []string
	explicitKinds      bool
}

// runAudit runs an Auditor over the clients as the command does — Run, then the report as
// text or JSON — and returns the command's exit code, the report and what went to stderr
// (an error, and the warnings logged).
func runAudit(t *testing.T, cl clientset.Clients, r run) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	log := logrus.New()
	log.SetOutput(&errb)
	log.SetLevel(logrus.WarnLevel)
	a := New(cl, log)
	a.Workloads, a.WorkloadsExplicit = r.workloads, r.explicitKinds
	if r.selector != "" {
		sel, err := labels.Parse(r.selector)
		if err != nil {
			t.Fatal(err)
		}
		a.Selector = sel
	}
	rep, err := a.Run(t.Context(), r.namespace, r.rollout, r.fix)
	if err != nil {
		errb.WriteString("configmap-attacher audit: " + err.Error() + "\n")
		return exitFail, out.String(), errb.String()
	}
	if r.json {
		if err := rep.WriteJSON(&out); err != nil {
			t.Fatal(err)
		}
	} else {
		rep.WriteText(&out)
	}
	if rep.Failed() {
		return exitFail, out.String(), errb.String()
	}
	return exitOK, out.String(), errb.String()
}
