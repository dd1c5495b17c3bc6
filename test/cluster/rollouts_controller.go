package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/configmap-attacher/configmap-attacher/test/cluster"
)

// Versions of the Argo Rollouts controller that hack/build-binaries.sh builds.
const (
	RolloutsVersion    = "v1.10.2"
	RolloutsOldVersion = "v1.9.1"
)

// PluginName is the name the plugin is registered under and that Rollout steps use.
const PluginName = "configmap-attacher/configmap-attacher"

// ControllerNamespace is the controller's namespace: argo-rollouts-config and the plugin's
// ServiceAccount live there.
const ControllerNamespace = "argo-rollouts"

// RolloutsDir returns <CacheDir>/rollouts-<version>, holding rollouts-controller and crds/.
// When they are missing it runs hack/build-binaries.sh (unless CMA_NO_BUILD=1, or the binaries
// come from CMA_KUBE_BIN_DIR); an error then wraps cluster.ErrUnavailable.
func RolloutsDir(version string) (string, error) {
	dir := filepath.Join(cluster.CacheDir(), "rollouts-"+version)
	ok := func() bool {
		fi, err := os.Stat(filepath.Join(dir, "rollouts-controller"))
		crds, _ := filepath.Glob(filepath.Join(dir, "crds", "*-crd.yaml"))
		return err == nil && fi.Mode()&0o111 != 0 && len(crds) > 0
	}
	if ok() {
		return dir, nil
	}
	if os.Getenv("CMA_NO_BUILD") == "1" {
		return "", fmt.Errorf("%w: %s lacks rollouts-controller or crds/ and CMA_NO_BUILD=1", cluster.ErrUnavailable, dir)
	}
	comp, env := "rollouts-controller", "ROLLOUTS_VERSION="+version
	if version != RolloutsVersion {
		comp, env = "rollouts-controller-old", "ROLLOUTS_OLD_VERSION="+version
	}
	script := filepath.Join(RepoRoot(), "hack", "build-binaries.sh")
	fmt.Fprintf(os.Stderr, "e2e: %s lacks the Argo Rollouts controller; building with %s %s (several minutes when cold)\n", dir, script, comp)
	cmd := exec.Command("bash", script, comp)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.Env = append(os.Environ(), "CMA_CACHE="+cluster.CacheDir(), env)
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%w: building the Argo Rollouts controller %s: %v", cluster.ErrUnavailable, version, err)
	}
	if !ok() {
		return "", fmt.Errorf("%w: %s still lacks rollouts-controller or crds/ after %s", cluster.ErrUnavailable, dir, script)
	}
	return dir, nil
}

// RepoRoot is the module root (two directories above this file).
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// RolloutsModuleDir returns the source directory of github.com/argoproj/argo-rollouts at
// version (from the module cache; downloaded through the module proxy if absent): the
// controller's ClusterRole comes from there, as users install it.
func RolloutsModuleDir(version string) (string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", "github.com/argoproj/argo-rollouts@"+version)
	cmd.Dir = RepoRoot()
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go mod download github.com/argoproj/argo-rollouts@%s: %v", version, err)
	}
	var m struct{ Dir string }
	if err := json.Unmarshal(out, &m); err != nil || m.Dir == "" {
		return "", fmt.Errorf("go mod download github.com/argoproj/argo-rollouts@%s: no Dir in %s", version, out)
	}
	return m.Dir, nil
}

// BuildPlugin builds the plugin binary (CGO_ENABLED=0) from the module root into dir.
func BuildPlugin(dir string) (string, error) {
	out := filepath.Join(dir, "configmap-attacher")
	cmd := exec.Command("go", "build", "-o", out, ".")
	cmd.Dir = RepoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build the plugin: %v\n%s", err, b)
	}
	return out, nil
}

// ControllerOptions configure StartController.
type ControllerOptions struct {
	// Version of the controller (RolloutsVersion or RolloutsOldVersion): its binary, CRDs and
	// ClusterRole are used.
	Version string
	// PluginBinary is the absolute path of the built plugin, registered as file://.
	PluginBinary string
	// PluginArgs follow "--kubeconfig <plugin kubeconfig>" in stepPlugins[].args.
	PluginArgs []string
}

// Controller is an Argo Rollouts controller process run against a cluster.Cluster with the
// plugin registered. It runs as admin; the plugin runs with the kubeconfig of ServiceAccount
// argo-rollouts/argo-rollouts, bound to the controller's own ClusterRole (from the
// argo-rollouts module) plus examples/rbac-step-plugin.yaml, as in a real installation.
type Controller struct {
	Version string
	// Dir is the controller's working directory: the controller copies file:// plugins into
	// Dir/plugin-bin/.
	Dir string
	// LogPath is the controller's log (stdout and stderr, appended across restarts, each start
	// preceded by a "=== start" line). Plugin lines appear as plugin.configmap-attacher lines.
	LogPath string
	// PluginKubeconfig is the plugin's (non-admin) kubeconfig.
	PluginKubeconfig string

	c    *cluster.Cluster
	bin  string
	args []string

	mu   sync.Mutex
	proc *child
	pids []int // every controller PID started, in order
}

// StartController installs the version's CRDs, the plugin's identity and RBAC, and
// argo-rollouts-config, then starts the controller and waits until its rollout workers run.
// Call Stop when done.
func StartController(c *cluster.Cluster, opts ControllerOptions) (*Controller, error) {
	rdir, err := RolloutsDir(opts.Version)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(c.Dir, "rollouts-controller-")
	if err != nil {
		return nil, err
	}
	ctl := &Controller{Version: opts.Version, Dir: dir, LogPath: filepath.Join(dir, "rollouts-controller.log"),
		c: c, bin: filepath.Join(rdir, "rollouts-controller")}
	if err := InstallCRDs(c, filepath.Join(rdir, "crds")); err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(c.AdminConfig)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ControllerNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create namespace %s: %w", ControllerNamespace, err)
	}
	if ctl.PluginKubeconfig, err = ctl.pluginIdentity(ctx, cs, opts.Version); err != nil {
		return nil, err
	}
	args := append([]string{"--kubeconfig", ctl.PluginKubeconfig}, opts.PluginArgs...)
	registration, err := yaml.Marshal([]map[string]any{{"name": PluginName, "location": "file://" + opts.PluginBinary, "args": args}})
	if err != nil {
		return nil, err
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "argo-rollouts-config", Namespace: ControllerNamespace},
		Data: map[string]string{"stepPlugins": string(registration)}}
	if _, err := cs.CoreV1().ConfigMaps(ControllerNamespace).Create(ctx, cm, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		_, err = cs.CoreV1().ConfigMaps(ControllerNamespace).Update(ctx, cm, metav1.UpdateOptions{})
		if err != nil {
			return nil, fmt.Errorf("update argo-rollouts-config: %w", err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("create argo-rollouts-config: %w", err)
	}
	ports, err := cluster.FreePorts(2)
	if err != nil {
		return nil, err
	}
	ctl.args = []string{"--kubeconfig", c.KubeconfigPath, "--leader-elect=false",
		"--metricsPort", strconv.Itoa(ports[0]), "--healthzPort", strconv.Itoa(ports[1]), "--loglevel", "info"}
	if err := ctl.Start(); err != nil {
		ctl.Stop()
		return nil, err
	}
	return ctl, nil
}

// pluginIdentity creates ServiceAccount argo-rollouts/argo-rollouts with the controller's
// ClusterRole and examples/rbac-step-plugin.yaml, and writes a kubeconfig with its token.
func (ctl *Controller) pluginIdentity(ctx context.Context, cs kubernetes.Interface, version string) (string, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "argo-rollouts", Namespace: ControllerNamespace}}
	if _, err := cs.CoreV1().ServiceAccounts(ControllerNamespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("create ServiceAccount argo-rollouts: %w", err)
	}
	mod, err := RolloutsModuleDir(version)
	if err != nil {
		return "", err
	}
	binding := filepath.Join(ctl.Dir, "argo-rollouts-clusterrolebinding.yaml")
	if err := os.WriteFile(binding, []byte(cluster.RolloutsControllerBinding), 0o644); err != nil {
		return "", err
	}
	for _, f := range []string{
		filepath.Join(mod, "manifests", "role", "argo-rollouts-clusterrole.yaml"),
		binding,
		filepath.Join(RepoRoot(), "examples", "rbac-step-plugin.yaml"),
	} {
		if err := Kubectl(ctl.c, "apply", "--server-side", "-f", f); err != nil {
			return "", err
		}
	}
	user := "system:serviceaccount:" + ControllerNamespace + ":argo-rollouts"
	for _, a := range []authorizationv1.ResourceAttributes{
		{Verb: "list", Group: "apps", Resource: "replicasets"},
		{Verb: "watch", Group: "argoproj.io", Resource: "rollouts"},
		{Verb: "patch", Resource: "configmaps", Namespace: "default"},
		{Verb: "patch", Resource: "secrets", Namespace: "default"},
	} {
		if err := WaitForAccess(ctx, cs, user, a); err != nil {
			return "", err
		}
	}
	return ServiceAccountKubeconfig(ctx, ctl.c, cs, ControllerNamespace, "argo-rollouts", ctl.Dir)
}

// Kubectl runs the cluster's kubectl as admin and returns its combined output in the error.
func Kubectl(c *cluster.Cluster, args ...string) error {
	cmd := exec.Command(filepath.Join(c.BinDir, "kubectl"), append([]string{"--kubeconfig", c.KubeconfigPath}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// InstallCRDs server-side applies every *-crd.yaml in dir and polls until each is Established.
func InstallCRDs(c *cluster.Cluster, dir string) error {
	files, _ := filepath.Glob(filepath.Join(dir, "*-crd.yaml"))
	if len(files) == 0 {
		return fmt.Errorf("no *-crd.yaml in %s", dir)
	}
	var names []string
	for _, f := range files {
		if err := Kubectl(c, "apply", "--server-side", "-f", f); err != nil {
			return err
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var m struct {
			Metadata struct{ Name string } `json:"metadata"`
		}
		if err := yaml.Unmarshal(b, &m); err != nil || m.Metadata.Name == "" {
			return fmt.Errorf("%s: no metadata.name (%v)", f, err)
		}
		names = append(names, m.Metadata.Name)
	}
	dyn, err := dynamic.NewForConfig(c.AdminConfig)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(60 * time.Second)
	for _, n := range names {
		for {
			crd, err := dyn.Resource(crdGVR).Get(context.Background(), n, metav1.GetOptions{})
			if err == nil && crdEstablished(crd.Object) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("CRD %s not Established after 60s (%v)", n, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

func crdEstablished(obj map[string]any) bool {
	status, _ := obj["status"].(map[string]any)
	conds, _ := status["conditions"].([]any)
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}

// WaitForAccess waits (up to 15 s) until a SubjectAccessReview allows user (a ServiceAccount)
// the access a describes: RBAC reaches the authorizer through informers.
func WaitForAccess(ctx context.Context, cs kubernetes.Interface, user string, a authorizationv1.ResourceAttributes) error {
	groups := []string{"system:authenticated"}
	if parts := strings.Split(user, ":"); len(parts) == 4 && parts[1] == "serviceaccount" {
		groups = append(groups, "system:serviceaccounts", "system:serviceaccounts:"+parts[2])
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		sar, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups, ResourceAttributes: &a}}, metav1.CreateOptions{})
		if err == nil && sar.Status.Allowed {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("RBAC: %s still may not %s %s.%s in %q after 15s (%v)", user, a.Verb, a.Resource, a.Group, a.Namespace, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ServiceAccountKubeconfig requests a token (24 h) for ServiceAccount ns/name and writes a
// kubeconfig with it into dir.
func ServiceAccountKubeconfig(ctx context.Context, c *cluster.Cluster, cs kubernetes.Interface, ns, name, dir string) (string, error) {
	exp := int64(24 * 3600)
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("TokenRequest for %s/%s: %w", ns, name, err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["cma"] = &clientcmdapi.Cluster{Server: c.Host, CertificateAuthorityData: c.AdminConfig.CAData}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["cma"] = &clientcmdapi.Context{Cluster: "cma", AuthInfo: name}
	kc.CurrentContext = "cma"
	path := filepath.Join(dir, fmt.Sprintf("kubeconfig-%s-%s.yaml", ns, name))
	return path, clientcmd.WriteToFile(*kc, path)
}

// Start starts the controller (it must not be running) in Dir with POD_NAMESPACE=argo-rollouts
// and waits up to 60 s until its rollout workers have started.
func (ctl *Controller) Start() error {
	ctl.mu.Lock()
	defer ctl.mu.Unlock()
	if ctl.proc != nil && ctl.proc.running() {
		return fmt.Errorf("rollouts-controller already running (pid %d)", ctl.proc.pid)
	}
	p, err := startChild(ctl.bin, ctl.args, ctl.Dir, ctl.LogPath, []string{"POD_NAMESPACE=" + ControllerNamespace})
	if err != nil {
		return err
	}
	ctl.proc = p
	ctl.pids = append(ctl.pids, p.pid)
	_ = os.WriteFile(filepath.Join(ctl.Dir, "pids"), []byte(fmt.Sprint(ctl.pids)+"\n"), 0o644)
	deadline := time.Now().Add(60 * time.Second)
	for {
		if strings.Contains(p.logSinceStart(), "Started rollout workers") {
			return nil
		}
		if !p.running() {
			return fmt.Errorf("rollouts-controller exited during start: %v\n%s", p.err, ctl.LogTail(40))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("rollouts-controller: no \"Started rollout workers\" after 60s\n%s", ctl.LogTail(40))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop sends SIGTERM to the controller, waits (SIGKILL after 15 s), and then makes sure the
// plugin processes it had started are gone. The controller must stop them itself: an error
// reports plugin processes that outlived it by more than 5 s (they are then killed, by PID).
// Safe to call when not running.
func (ctl *Controller) Stop() error {
	ctl.mu.Lock()
	defer ctl.mu.Unlock()
	p := ctl.proc
	if p == nil || !p.running() {
		return nil
	}
	plugins := ChildPIDs(p.pid)
	p.stop(15 * time.Second)
	var survivors []int
	for _, pid := range plugins {
		if !waitPIDGone(pid, 5*time.Second) {
			survivors = append(survivors, pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
			waitPIDGone(pid, 5*time.Second)
		}
	}
	if len(survivors) > 0 {
		return fmt.Errorf("plugin process(es) %v outlived the controller (pid %d) by 5s; killed", survivors, p.pid)
	}
	return nil
}

// Restart is Stop then Start.
func (ctl *Controller) Restart() error {
	if err := ctl.Stop(); err != nil {
		return err
	}
	return ctl.Start()
}

// PID is the running controller's PID (0 when stopped).
func (ctl *Controller) PID() int {
	ctl.mu.Lock()
	defer ctl.mu.Unlock()
	if ctl.proc == nil || !ctl.proc.running() {
		return 0
	}
	return ctl.proc.pid
}

// PIDs are all controller PIDs started so far.
func (ctl *Controller) PIDs() []int {
	ctl.mu.Lock()
	defer ctl.mu.Unlock()
	return append([]int(nil), ctl.pids...)
}

// PluginPIDs are the running controller's child processes (the plugin processes).
func (ctl *Controller) PluginPIDs() []int {
	if pid := ctl.PID(); pid != 0 {
		return ChildPIDs(pid)
	}
	return nil
}

// Log returns the whole controller log.
func (ctl *Controller) Log() string {
	b, _ := os.ReadFile(ctl.LogPath)
	return string(b)
}

// LogTail returns the last n lines of the controller log.
func (ctl *Controller) LogTail(n int) string {
	lines := strings.Split(strings.TrimRight(ctl.Log(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return fmt.Sprintf("--- last %d lines of %s ---\n%s", len(lines), ctl.LogPath, strings.Join(lines, "\n"))
}

// ChildPIDs lists the live (non-zombie) processes whose parent is pid, from /proc.
func ChildPIDs(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ppid, state, ok := procStat(n)
		if ok && ppid == pid && state != "Z" {
			out = append(out, n)
		}
	}
	return out
}

// procStat reads the parent PID and state of a process from /proc/<pid>/stat.
func procStat(pid int) (ppid int, state string, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, "", false
	}
	// pid (comm) state ppid ...; comm may contain spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, "", false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, "", false
	}
	ppid, err = strconv.Atoi(f[1])
	return ppid, f[0], err == nil
}

// PIDAlive reports whether pid is a live, non-zombie process.
func PIDAlive(pid int) bool {
	_, state, ok := procStat(pid)
	return ok && state != "Z"
}

func waitPIDGone(pid int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for PIDAlive(pid) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// child is one process this package started. Only its PID is ever signalled.
type child struct {
	pid     int
	logPath string
	offset  int64         // log size at start
	done    chan struct{} // closed when it has exited
	err     error         // Wait result, valid after done
}

// startChild starts bin with its output appended to logPath. The forking goroutine keeps its
// OS thread until the child exits, so Pdeathsig (SIGKILL when the test binary dies) fires only
// when the test binary itself dies.
func startChild(bin string, args []string, dir, logPath string, env []string) (*child, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fi, _ := logf.Stat()
	fmt.Fprintf(logf, "=== start %s %s %s\n", time.Now().Format(time.RFC3339Nano), bin, strings.Join(args, " "))
	p := &child{logPath: logPath, offset: fi.Size(), done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer close(p.done)
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.Env = append(os.Environ(), env...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		err := cmd.Start()
		logf.Close()
		if err != nil {
			p.err = err
			started <- err
			return
		}
		p.pid = cmd.Process.Pid
		started <- nil
		p.err = cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	return p, nil
}

func (p *child) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

func (p *child) stop(grace time.Duration) {
	if !p.running() {
		return
	}
	_ = syscall.Kill(p.pid, syscall.SIGTERM)
	select {
	case <-p.done:
		return
	case <-time.After(grace):
	}
	_ = syscall.Kill(p.pid, syscall.SIGKILL)
	<-p.done
}

func (p *child) logSinceStart() string {
	f, err := os.Open(p.logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(p.offset, 0); err != nil {
		return ""
	}
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(f)
	return buf.String()
}

// Healthz reports whether the controller's healthz endpoint answers 200.
func (ctl *Controller) Healthz() error {
	port := ""
	for i, a := range ctl.args {
		if a == "--healthzPort" && i+1 < len(ctl.args) {
			port = ctl.args[i+1]
		}
	}
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Get("http://127.0.0.1:" + port + "/healthz")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return errors.New(resp.Status)
	}
	return nil
}
