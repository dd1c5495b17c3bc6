package job

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	rolloutsclient "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned"
	rolloutsfake "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned/fake"
	"github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/test/support/fixtures"
)

// jobOf is the request the Job's flags make for Rollout shop/web (the default opt-in policy),
// with a short wait for missing objects: the fakes never create one late.
func jobOf(configMaps, secrets []string, timeout time.Duration) Request {
	return Request{Namespace: testNS, Rollout: "web", CreationWait: shortCreationWait,
		Config: plugin.Config{ConfigMaps: configMaps, Secrets: secrets, Timeout: plugin.Duration{Duration: timeout}},
		Policy: plugin.Policy{OptIn: labels.SelectorFromSet(labels.Set{plugin.OptInLabel: "true"})}}
}

// shortCreationWait replaces the 5 s wait for a listed object not created yet.
const shortCreationWait = 50 * time.Millisecond

// runJob runs WaitAndAttach as cmd.Job does and returns its message, what it logged and the
// error.
func runJob(t *testing.T, kube kubernetes.Interface, ro rolloutsclient.Interface, req Request) (string, string, error) {
	t.Helper()
	var logs bytes.Buffer
	l := logrus.New()
	l.SetOutput(&logs)
	c := clientsOf(kube)
	c.Rollouts = ro
	req.Clients, req.PollInterval = c, 10*time.Millisecond
	req.Log = l.WithFields(logrus.Fields{"rollout": req.Rollout, "namespace": req.Namespace})
	msg, err := WaitAndAttach(t.Context(), req)
	return msg, logs.String(), err
}

// TestJobWaitsForNewReplicaSet: started before the controller caught up (stale status, no
// new ReplicaSet), it waits and then attaches to the new ReplicaSet only.
func TestJobWaitsForNewReplicaSet(t *testing.T) {
	ro := fixtures.Rollout(oldHash)
	ro.Generation = 4 // the new spec is applied, the controller has not seen it yet
	kube := fake.NewClientset(fixtures.ReplicaSet(oldHash, "uid-old", fixtures.RolloutUID, fixtures.PodSpec([]string{"cfg-old"}, nil)), fixtures.ConfigMap("cfg-old"), fixtures.ConfigMap("cfg-new"), fixtures.Secret("sec-new"))
	rc := rolloutsfake.NewSimpleClientset(ro)

	// The controller catches up after a few polls.
	go func() {
		time.Sleep(50 * time.Millisecond)
		_, _ = kube.AppsV1().ReplicaSets(testNS).Create(t.Context(), fixtures.ReplicaSet(curHash, "uid-cur", fixtures.RolloutUID, fixtures.PodSpec([]string{"cfg-new"}, []string{"sec-new"})), metav1.CreateOptions{})
		r, _ := rc.ArgoprojV1alpha1().Rollouts(testNS).Get(t.Context(), "web", metav1.GetOptions{})
		r.Status.ObservedGeneration = "4"
		r.Status.CurrentPodHash = curHash
		_, _ = rc.ArgoprojV1alpha1().Rollouts(testNS).Update(t.Context(), r, metav1.UpdateOptions{})
	}()
	msg, logs, err := runJob(t, kube, rc, jobOf([]string{"cfg-new"}, []string{"sec-new"}, 10*time.Second))
	if err != nil {
		t.Fatalf("%v: %s", err, logs)
	}
	// cmd.Job prints the message as its only line on stdout (cmd TestJobPrintsAndLogs).
	if want := "attached 1 ConfigMap and 1 Secret to ReplicaSet web-" + curHash + " of Rollout shop/web"; msg != want {
		t.Errorf("message %q, want %q", msg, want)
	}
	if !strings.Contains(logs, "waiting for the Rollouts controller to observe generation 4") {
		t.Errorf("log lacks the wait: %s", logs)
	}
	if !hasOwner(owners(t, kube, plugin.KindConfigMap, "cfg-new"), "uid-cur") || !hasOwner(owners(t, kube, plugin.KindSecret, "sec-new"), "uid-cur") {
		t.Error("not attached to the new ReplicaSet")
	}
	if len(owners(t, kube, plugin.KindConfigMap, "cfg-old")) != 0 {
		t.Error("touched an unlisted object")
	}
	if strings.Contains(logs+msg, "s3cr3t") || strings.Contains(logs+msg, "color: blue") {
		t.Error("object data was logged")
	}
}

func TestJobTimesOut(t *testing.T) {
	ro := fixtures.Rollout(curHash)
	// The ReplicaSet of the current spec exists but no template uses the listed object: the
	// rule table fails at once instead of waiting for a template change that cannot come.
	kube := fake.NewClientset(fixtures.ReplicaSet(curHash, "uid-cur", fixtures.RolloutUID, fixtures.PodSpec([]string{"cfg-new"}, nil)), fixtures.ConfigMap("other"))
	start := time.Now()
	_, _, err := runJob(t, kube, rolloutsfake.NewSimpleClientset(ro), jobOf([]string{"other"}, nil, time.Minute))
	if err == nil || !strings.Contains(err.Error(), "refusing to attach ConfigMap other: no ReplicaSet of Rollout shop/web references it") {
		t.Errorf("error %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %s: must not wait out the timeout", d)
	}
	if len(owners(t, kube, plugin.KindConfigMap, "other")) != 0 {
		t.Error("wrote on timeout")
	}
	// A missing Rollout is waited for too, and the message says so.
	_, _, err = runJob(t, kube, rolloutsfake.NewSimpleClientset(), jobOf([]string{"other"}, nil, time.Second))
	if err == nil || !strings.Contains(err.Error(), "waiting for Rollout shop/web to exist") {
		t.Errorf("error %v", err)
	}
}

func TestJobMissingObjectFails(t *testing.T) {
	ro := fixtures.Rollout(curHash)
	kube := fake.NewClientset(fixtures.ReplicaSet(curHash, "uid-cur", fixtures.RolloutUID, fixtures.PodSpec([]string{"cfg-new"}, nil)))
	_, _, err := runJob(t, kube, rolloutsfake.NewSimpleClientset(ro), jobOf([]string{"cfg-new"}, nil, 5*time.Second))
	if err == nil || !strings.Contains(err.Error(), "not found in namespace shop: ConfigMap cfg-new") {
		t.Errorf("error %v", err)
	}
}

func TestJobWorkloadRef(t *testing.T) {
	ro := fixtures.Rollout(curHash)
	ro.Spec.Selector = nil
	ro.Spec.WorkloadRef = &v1alpha1.ObjectRef{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"}
	ro.Status.WorkloadObservedGeneration = "1"
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: testNS, Generation: 2},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}
	kube := fake.NewClientset(d, fixtures.ReplicaSet(curHash, "uid-cur", fixtures.RolloutUID, fixtures.PodSpec([]string{"cfg-new"}, nil)), fixtures.ConfigMap("cfg-new"))
	rc := rolloutsfake.NewSimpleClientset(ro)
	_, logs, err := runJob(t, kube, rc, jobOf([]string{"cfg-new"}, nil, time.Second))
	if err == nil || !strings.Contains(err.Error(), "observe generation 2 of Deployment shop/web") {
		t.Fatalf("must wait for the Deployment's generation: %v %s", err, logs)
	}
	ro.Status.WorkloadObservedGeneration = "2"
	_, _ = rc.ArgoprojV1alpha1().Rollouts(testNS).UpdateStatus(t.Context(), ro, metav1.UpdateOptions{})
	_, logs, err = runJob(t, kube, rc, jobOf([]string{"cfg-new"}, nil, 5*time.Second))
	if err != nil || !hasOwner(owners(t, kube, plugin.KindConfigMap, "cfg-new"), "uid-cur") {
		t.Errorf("%v: %s", err, logs)
	}
}

func TestJobDiscoverAndDryRun(t *testing.T) {
	kube := fixtures.History()
	rc := rolloutsfake.NewSimpleClientset(fixtures.Rollout(curHash))
	req := jobOf(nil, nil, 5*time.Second)
	req.Config.Discover, req.Config.DryRun = &plugin.Discover{}, true
	out, logs, err := runJob(t, kube, rc, req)
	if err != nil || !strings.Contains(out, "dry run, nothing written") || !strings.Contains(out, "discover would add 6 owner reference(s)") {
		t.Fatalf("%v: %s %s", err, out, logs)
	}
	if writes(kube) != 0 {
		t.Fatalf("dry run wrote")
	}
	req.Config.DryRun = false
	out, logs, err = runJob(t, kube, rc, req)
	if err != nil || !strings.Contains(out, "discover: added 6 owner reference(s)") {
		t.Fatalf("%v: %s %s", err, out, logs)
	}
	if !hasOwner(owners(t, kube, plugin.KindConfigMap, "cfg-1"), "uid-1") {
		t.Error("first revision not attached")
	}
	// The run recorded a Normal event on the Rollout before returning.
	evs, _ := kube.CoreV1().Events(testNS).List(t.Context(), metav1.ListOptions{})
	if len(evs.Items) != 1 || evs.Items[0].Reason != plugin.ReasonAttached {
		t.Errorf("events %v", evs.Items)
	}
}

// Shorthands for the shared fixtures.
const oldHash, curHash = fixtures.OldHash, fixtures.CurHash

var (
	hasOwner = fixtures.HasOwner
	writes   = fixtures.Writes
)

func owners(t *testing.T, c kubernetes.Interface, kind plugin.Kind, name string) []metav1.OwnerReference {
	return fixtures.Owners(t, c, kind == plugin.KindSecret, name)
}

// TestJobPollsOnlyItsReplicaSets: while the ReplicaSet of the current template does not exist,
// each poll reads the Rollout and lists its ReplicaSets by its selector, and nothing else of
// the namespace (its Pods, StatefulSets, … are read only once the target exists).
func TestJobPollsOnlyItsReplicaSets(t *testing.T) {
	ro := fixtures.Rollout(curHash)
	kube := fake.NewClientset(fixtures.ReplicaSet(oldHash, "uid-old", fixtures.RolloutUID, fixtures.PodSpec([]string{"cfg-old"}, nil)),
		fixtures.ConfigMap("cfg-new"), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "debug", Namespace: testNS}})
	_, _, err := runJob(t, kube, rolloutsfake.NewSimpleClientset(ro), jobOf([]string{"cfg-new"}, nil, 300*time.Millisecond))
	if err == nil || !strings.Contains(err.Error(), "timed out") {
		t.Fatalf("error %v, want the timeout", err)
	}
	polls := 0
	for _, a := range kube.Actions() {
		switch {
		case a.GetVerb() == "create" && a.GetResource().Resource == "events":
		case a.GetVerb() == "list" && a.GetResource().Resource == "replicasets" &&
			a.(k8stesting.ListAction).GetListRestrictions().Labels.String() == "app=web":
			polls++
		default:
			t.Errorf("a waiting poll sent %s %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
	if polls < 2 {
		t.Errorf("%d polls: the check would pass by accident", polls)
	}
}
