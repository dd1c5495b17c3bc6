package publish

import (
	"archive/tar"
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// installFromRegistry: `helm install oci://HOST/charts/configmap-attacher` (the real helm, the
// real control plane) with the image by the pushed digest; the Deployment names exactly that
// reference; the test pulls it, unpacks this host's platform, runs its entrypoint with the
// Deployment's args and env (a TokenRequest kubeconfig of the chart's ServiceAccount standing
// for the in-cluster config) and waits until an opted-in ConfigMap is owned by its user's
// ReplicaSet.
func installFromRegistry(t *testing.T, ctx context.Context, c *cluster.Cluster, tl *tools, dist, host string, p published) {
	cs := c.Client(t)
	app := c.Namespace(t)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "web-config-1", Labels: map[string]string{"configmap-attacher/revisioned": "true"}},
		Data: map[string]string{"k": "v"}}
	if _, err := cs.CoreV1().ConfigMaps(app).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rs := createDeployment(t, ctx, c, app, cm.Name)

	ns := c.Namespace(t)
	ports, err := cluster.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte(fmt.Sprintf("image: {repository: %s, digest: %q}\nmetrics: {bindAddress: 127.0.0.1, port: %d}\nhealth: {bindAddress: 127.0.0.1, port: %d}\nlogFormat: text\n",
		p.imageRef, p.imageDigest, ports[0], ports[1])), 0o644); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	kc := []string{"KUBECONFIG=" + c.KubeconfigPath}
	out, err := tl.run(ctx, kc, tl.helm, "install", "cma", "oci://"+p.chartName, "--version", chartVersion, "--plain-http", "-n", ns, "-f", values)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// --no-hooks: the cleanup hook's Job would never run (no kubelet runs pods here).
		if _, err := tl.run(context.Background(), kc, tl.helm, "uninstall", "cma", "-n", ns, "--no-hooks"); err != nil {
			t.Errorf("helm uninstall: %v", err)
		}
	})
	// helm prints the digest of the chart it pulled: the one publish.sh pushed and cosign verified.
	if !strings.Contains(out, "Digest: "+p.chartDigest) || !strings.Contains(out, "STATUS: deployed") {
		t.Errorf("helm install oci://%s --version %s: want the pushed chart %s deployed:\n%s", p.chartName, chartVersion, p.chartDigest, out)
	}
	t.Logf("helm install oci://%s --version %s in %s", p.chartName, chartVersion, time.Since(t0).Round(time.Millisecond))

	d, err := cs.AppsV1().Deployments(ns).Get(ctx, "cma-configmap-attacher", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctr := d.Spec.Template.Spec.Containers[0]
	if want := p.imageRef + "@" + p.imageDigest; ctr.Image != want {
		t.Fatalf("the installed Deployment runs image %q, want the pushed digest %s", ctr.Image, want)
	}
	entry := pullAndUnpack(t, ctr.Image)
	if got, want := fileSHA256(t, entry), releaseSum(t, dist, "configmap-attacher-linux-"+runtime.GOARCH); got != want {
		t.Errorf("the entrypoint of %s for linux/%s has sha256 %s, the release's binary %s", ctr.Image, runtime.GOARCH, got, want)
	}
	proc := runContainer(t, ctx, c, ns, d, entry)
	cluster.WaitUntil(t, ctx, 50*time.Millisecond, cm.Name+" owned by ReplicaSet "+rs.Name, func() (bool, string) {
		if !proc.running() {
			t.Fatalf("the image's controller exited before adopting:\n%s", proc.tail(30))
		}
		got, err := cs.CoreV1().ConfigMaps(app).Get(ctx, cm.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, o := range got.OwnerReferences {
			if o.UID == rs.UID && o.Kind == "ReplicaSet" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("owners %v; controller log: %s", got.OwnerReferences, proc.tail(5))
	})
	t.Logf("the controller of %s (from the registry, linux/%s) adopted %s/%s %s after helm install", ctr.Image, runtime.GOARCH, app, cm.Name, time.Since(t0).Round(time.Millisecond))
}

// createDeployment creates Deployment web in ns whose pods mount configMap, and returns its
// ReplicaSet (made by the real kube-controller-manager).
func createDeployment(t *testing.T, ctx context.Context, c *cluster.Cluster, ns, configMap string) *appsv1.ReplicaSet {
	t.Helper()
	cs := c.Client(t)
	one, no := int32(1), false
	labels := map[string]string{"app": "web"}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: appsv1.DeploymentSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{AutomountServiceAccountToken: &no,
					Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/web:1", VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/web"}}}},
					Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
						LocalObjectReference: corev1.LocalObjectReference{Name: configMap}}}}}}}}}
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var rs *appsv1.ReplicaSet
	cluster.WaitUntil(t, ctx, 50*time.Millisecond, "the ReplicaSet of Deployment web", func() (bool, string) {
		l, err := cs.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(l.Items) == 0 {
			return false, fmt.Sprint(err)
		}
		rs = &l.Items[0]
		return true, ""
	})
	return rs
}

// pullAndUnpack pulls ref (an index by digest) from the registry, unpacks the filesystem of
// its linux/GOARCH image and returns the path of the image's entrypoint in it.
func pullAndUnpack(t *testing.T, ref string) string {
	t.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(r, remote.WithPlatform(v1.Platform{OS: "linux", Architecture: runtime.GOARCH}))
	if err != nil {
		t.Fatalf("pulling %s for linux/%s: %v", ref, runtime.GOARCH, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if len(cf.Config.Entrypoint) != 1 {
		t.Fatalf("%s: entrypoint %q, want the binary alone", ref, cf.Config.Entrypoint)
	}
	root := filepath.Join(t.TempDir(), "rootfs")
	unpack(t, mutate.Extract(img), root)
	return filepath.Join(root, strings.TrimPrefix(cf.Config.Entrypoint[0], "/"))
}

// unpack writes the regular files and directories of a flattened image filesystem under dir.
func unpack(t *testing.T, r io.ReadCloser, dir string) {
	t.Helper()
	defer r.Close()
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		n := path.Clean(strings.TrimPrefix(h.Name, "/"))
		if !filepath.IsLocal(n) {
			t.Fatalf("image entry %q escapes the root", h.Name)
		}
		p := filepath.Join(dir, filepath.FromSlash(n))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeReg:
			err = writeFile(p, tr, os.FileMode(h.Mode&0o777))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func writeFile(p string, r io.Reader, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func fileSHA256(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// releaseSum is file's sha256 in dist/checksums.txt.
func releaseSum(t *testing.T, dist, file string) string {
	t.Helper()
	f, err := os.Open(filepath.Join(dist, "checksums.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if sum, n, ok := strings.Cut(sc.Text(), "  "); ok && n == file {
			return sum
		}
	}
	t.Fatalf("dist/checksums.txt lists no %s", file)
	return ""
}

// container is the image's entrypoint running as the Deployment's container would.
type container struct {
	logPath string
	done    chan struct{}
}

func (p *container) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

func (p *container) tail(n int) string {
	b, _ := os.ReadFile(p.logPath)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// runContainer starts entry with d's container args and env (the fieldRefs and the memory
// limit as the kubelet sets them) and a kubeconfig with a token of d's ServiceAccount; SIGTERM
// (then SIGKILL) at cleanup, by PID.
func runContainer(t *testing.T, ctx context.Context, c *cluster.Cluster, ns string, d *appsv1.Deployment, entry string) *container {
	t.Helper()
	ctr := d.Spec.Template.Spec.Containers[0]
	if len(ctr.Command) != 0 || len(ctr.Args) == 0 || ctr.Args[0] != "controller" {
		t.Fatalf("container command %q args %q: want the image's entrypoint with controller ...", ctr.Command, ctr.Args)
	}
	kubeconfig, err := cluster.ServiceAccountKubeconfig(ctx, c, c.Client(t), ns, d.Spec.Template.Spec.ServiceAccountName, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "POD_NAMESPACE=" + ns}
	for _, e := range ctr.Env {
		switch {
		case e.ValueFrom == nil:
			env = append(env, e.Name+"="+e.Value)
		case e.ValueFrom.ResourceFieldRef != nil && e.ValueFrom.ResourceFieldRef.Resource == "limits.memory":
			env = append(env, fmt.Sprintf("%s=%d", e.Name, ctr.Resources.Limits.Memory().Value()))
		case e.Name != "POD_NAMESPACE":
			t.Fatalf("env %s: a source this test does not emulate: %+v", e.Name, e.ValueFrom)
		}
	}
	p := &container{logPath: filepath.Join(c.Dir, "publish-controller-"+ns+".log"), done: make(chan struct{})}
	f, err := os.Create(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(entry, append(slices.Clone(ctr.Args), "-kubeconfig", kubeconfig)...)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); f.Close(); close(p.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("controller log %s:\n%s", p.logPath, p.tail(40))
		}
	})
	t.Logf("running %s (linux/%s, from the registry) %s", entry, runtime.GOARCH, strings.Join(ctr.Args, " "))
	return p
}
