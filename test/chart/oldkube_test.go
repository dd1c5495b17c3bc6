package chart

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	rolloutsclient "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
	"github.com/configmap-attacher/configmap-attacher/test/support/fixtures"
)

// TestOldestKubernetes makes the chart's kubeVersion floor a tested fact: on a control plane of
// cluster.OldKubeVersion (kube-apiserver and kube-controller-manager built from its modules),
// the chart with every knob set passes a server-side dry run (this version's schemas), helm
// installs the chart and its controller adopts an opted-in ConfigMap of a Deployment's
// ReplicaSet under the chart's RBAC (helmInstall: the same checks as TestHelmInstall), and the
// step plugin, run by the real Argo Rollouts controller, attaches a Rollout's ConfigMap to the
// new ReplicaSet. Once each: the full matrix runs on cluster.KubeVersion.
func TestOldestKubernetes(t *testing.T) {
	if _, err := cluster.RolloutsDir(cluster.RolloutsVersion); err != nil {
		cluster.SkipOrFail(t, err)
	}
	helmBin(t) // skip (or fail on CI) before starting anything when helm is missing
	c := cluster.Start(t, cluster.Options{KubeVersion: cluster.OldKubeVersion})
	if got := serverVersion(t, c); got != cluster.OldKubeVersion {
		t.Fatalf("kube-apiserver reports %s, want %s", got, cluster.OldKubeVersion)
	}
	bin, err := cluster.PluginBinary()
	if err != nil {
		t.Fatal(err)
	}
	step, err := cluster.StepPluginBinary()
	if err != nil {
		t.Fatal(err)
	}
	kubelet := cluster.StartFakeKubelet(c.Client(t))
	t.Cleanup(kubelet.Stop)
	// The Rollouts controller first: it installs the Rollout CRD, so the chart's controller
	// watches Rollouts as well as Deployments (its default beside the CRD).
	ctl, err := cluster.StartRolloutsController(c, cluster.RolloutsControllerOptions{Version: cluster.RolloutsVersion, PluginBinary: step})
	if err != nil {
		if errors.Is(err, cluster.ErrUnavailable) {
			cluster.SkipOrFail(t, err)
		}
		t.Fatalf("rollouts-controller %s: %v", cluster.RolloutsVersion, err)
	}
	t.Cleanup(func() {
		if err := ctl.Stop(); err != nil {
			t.Errorf("stopping rollouts-controller: %v", err)
		}
		if t.Failed() {
			t.Logf("rollouts-controller log %s:\n%s", ctl.LogPath, ctl.LogTail(40))
		}
	})

	// Every knob of the chart at once, against this version's schemas (the monitoring objects
	// against the prometheus-operator CRDs).
	t.Run("every-knob-server-dry-run", func(t *testing.T) {
		prepareDryRun(t, c)
		objs, out, err := render(t, everyKnob)
		if err != nil {
			t.Fatal(err)
		}
		serverDryRun(t, c, objs, out)
	})
	t.Run("helm-install-adoption", func(t *testing.T) {
		helmInstall(t, c, bin, func(string) string { return "" })
	})
	t.Run("step-attach", func(t *testing.T) {
		stepAttachOnce(t, c)
	})
}

// serverVersion is the apiserver's /version gitVersion.
func serverVersion(t *testing.T, c *cluster.Cluster) string {
	t.Helper()
	v, err := c.Client(t).Discovery().ServerVersion()
	if err != nil {
		t.Fatalf("server version: %v", err)
	}
	return v.GitVersion
}

// stepAttachOnce deploys Rollout web (revision 1 goes straight to Healthy: no steps on the
// initial deploy), then revision 2, whose first step is the plugin's listing web-config-2, and
// waits until that step has ended Successful and web-config-2 is owned by the new ReplicaSet.
// web-config-2 is not opted in, so the chart's controller leaves it alone: only the step can
// have attached it.
func stepAttachOnce(t *testing.T, c *cluster.Cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs := c.Client(t)
	rc, err := rolloutsclient.NewForConfig(c.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	ns := c.Namespace(t)
	cm := func(rev int) string { return fmt.Sprintf("web-config-%d", rev) }
	template := func(rev int) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
			Spec: fixtures.RunnablePodSpec(cm(rev), "")}
	}
	steps := func(rev int) []v1alpha1.CanaryStep {
		cfg, _ := json.Marshal(map[string]any{"configMaps": []string{cm(rev)}})
		return []v1alpha1.CanaryStep{{Plugin: &v1alpha1.PluginStep{Name: cluster.PluginName, Config: cfg}}, {Pause: &v1alpha1.RolloutPause{}}}
	}
	for rev := 1; rev <= 2; rev++ {
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cm(rev)},
			Data: map[string]string{"app.conf": fmt.Sprintf("revision %d\n", rev)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	one := int32(1)
	ro := &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: v1alpha1.RolloutSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: template(1), Strategy: v1alpha1.RolloutStrategy{Canary: &v1alpha1.CanaryStrategy{Steps: steps(1)}}}}
	if _, err := rc.ArgoprojV1alpha1().Rollouts(ns).Create(ctx, ro, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cluster.WaitUntil(t, ctx, 100*time.Millisecond, "Rollout web Healthy at revision 1", func() (bool, string) {
		got, err := rc.ArgoprojV1alpha1().Rollouts(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return got.Status.Phase == v1alpha1.RolloutPhaseHealthy && cluster.RolloutObserved(got) && got.Status.AvailableReplicas == 1, cluster.RolloutState(got)
	})
	start := time.Now()
	if err := cluster.UpdateRollout(ctx, rc, ns, "web", func(r *v1alpha1.Rollout) {
		r.Spec.Template, r.Spec.Strategy.Canary.Steps = template(2), steps(2)
	}); err != nil {
		t.Fatal(err)
	}
	var status struct{ ReplicaSet, ReplicaSetUID string }
	var message string
	cluster.WaitUntil(t, ctx, 100*time.Millisecond, "the plugin step Successful at revision 2", func() (bool, string) {
		got, err := rc.ArgoprojV1alpha1().Rollouts(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, s := range got.Status.Canary.StepPluginStatuses {
			if s.Index != 0 || s.Operation != v1alpha1.StepPluginOperationRun {
				continue
			}
			if s.Phase == v1alpha1.StepPluginPhaseFailed || s.Phase == v1alpha1.StepPluginPhaseError {
				t.Fatalf("plugin step %s: %s", s.Phase, s.Message)
			}
			if s.Phase == v1alpha1.StepPluginPhaseSuccessful {
				message = s.Message
				return json.Unmarshal(s.Status, &status) == nil && status.ReplicaSetUID != "", s.Message
			}
		}
		return false, cluster.RolloutState(got)
	})
	rs, err := cs.AppsV1().ReplicaSets(ns).Get(ctx, status.ReplicaSet, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(rs.UID) != status.ReplicaSetUID || rs.Spec.Template.Spec.Volumes[0].ConfigMap.Name != cm(2) {
		t.Fatalf("step status names ReplicaSet %s (UID %s): not revision 2's (UID %s, volume %+v)", status.ReplicaSet, status.ReplicaSetUID, rs.UID, rs.Spec.Template.Spec.Volumes)
	}
	if want := "attached 1 ConfigMap to ReplicaSet " + rs.Name; message != want {
		t.Errorf("step message %q, want %q", message, want)
	}
	cluster.WaitUntil(t, ctx, 100*time.Millisecond, cm(2)+" owned by ReplicaSet "+rs.Name, func() (bool, string) {
		got, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, cm(2), metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, o := range got.OwnerReferences {
			if o.UID == rs.UID && o.Kind == "ReplicaSet" && o.APIVersion == "apps/v1" && o.Name == rs.Name {
				return true, ""
			}
		}
		return false, fmt.Sprintf("owners %v", got.OwnerReferences)
	})
	t.Logf("Kubernetes %s: revision 2 applied → step %q in %v", c.KubeVersion, message, time.Since(start).Round(time.Millisecond))
}
