package cmd

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/plugin/clientset"
)

func runCleanupCmd(t *testing.T, kube *fake.Clientset, meta *metadatafake.FakeMetadataClient, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	c := &Cleanup{Stdout: &out, Stderr: &errb, Clients: Clients{Typed: func(plugin.ClientOptions) (clientset.Clients, error) {
		return clientset.Clients{Kube: kube, Meta: meta}, nil
	}}}
	return c.Main(args), out.String(), errb.String()
}

func TestCleanupUsageErrors(t *testing.T) {
	kube := fake.NewClientset()
	code, out, stderr := runCleanupCmd(t, kube, nil, "-namespaces", "Shop,a,a", "-o", "xml", "-stop-controller", "nons",
		"-timeout", "0s", "-stop-timeout", "-1s", "-force", "-dry-run", "extra")
	if code != ExitUsage || out != "" {
		t.Errorf("exit %d, stdout %q", code, out)
	}
	for _, want := range []string{`unexpected argument "extra"`, `-n/--namespace: "Shop" is not a valid namespace name`, `-n/--namespace: "a" is listed twice`,
		`-o "xml": use text, json or yaml`, `-stop-controller "nons": want NAMESPACE/NAME`, "-timeout 0s: must be positive",
		"-stop-timeout -1s: must be positive", "-force with -dry-run"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if len(kube.Actions()) != 0 {
		t.Error("bad usage made API calls")
	}
	if code, stderr, _ := runCleanupCmd(t, nil, nil, "-help"); code != ExitOK || !strings.Contains(stderr, "Usage: configmap-attacher cleanup") {
		t.Errorf("-help: %d %s", code, stderr)
	}
}

// Exit 1 while the CronJob's anchor is needed (nothing deleted), 0 with -force; -o json parses.
func TestCleanupExitCodes(t *testing.T) {
	setup := func() (*fake.Clientset, *metadatafake.FakeMetadataClient) {
		a := plugin.NewAnchor("CronJob", "nightly", []plugin.Object{{Kind: plugin.KindConfigMap, Name: "nightly-1"}}).ControllerRevision("shop", "uid-ns-shop")
		a.UID = "uid-anchor"
		cj := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: "shop"}}
		cj.Spec.JobTemplate.Spec.Template.Spec.Containers = []corev1.Container{corev1Container("nightly-1")}
		scheme := metadatafake.NewTestScheme()
		if err := metav1.AddMetaToScheme(scheme); err != nil {
			t.Fatal(err)
		}
		cm := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Name: "nightly-1", Namespace: "shop", OwnerReferences: []metav1.OwnerReference{
				{APIVersion: "apps/v1", Kind: "ControllerRevision", Name: a.Name, UID: a.UID}}}}
		return fake.NewClientset(a, cj), metadatafake.NewSimpleMetadataClient(scheme, cm)
	}
	kube, meta := setup()
	code, out, stderr := runCleanupCmd(t, kube, meta)
	if code != ExitFail || !strings.Contains(out, "ConfigMap nightly-1 is used by CronJob/nightly") || !strings.Contains(out, "nothing was deleted") {
		t.Errorf("refused: exit %d\n%s%s", code, out, stderr)
	}
	kube, meta = setup()
	code, out, stderr = runCleanupCmd(t, kube, meta, "-force", "-o", "json", "-namespaces", "shop")
	var doc struct{ Summary map[string]int }
	if err := json.Unmarshal([]byte(out), &doc); err != nil || code != ExitOK || doc.Summary["deleted"] != 1 {
		t.Errorf("-force: exit %d, %v\n%s%s", code, err, out, stderr)
	}
}

// corev1Container is a container that takes its environment from ConfigMap name.
func corev1Container(name string) corev1.Container {
	return corev1.Container{Name: "job", Image: "job:1", EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: name}}}}}
}
