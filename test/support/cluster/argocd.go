package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// ArgoCDVersion is the Argo CD release hack/build-binaries.sh builds (component argocd).
const ArgoCDVersion = "v3.2.6"

// ArgoCDNamespace is where the Argo CD objects (argocd-cm, argocd-secret, AppProjects,
// Applications) live, as in a default installation.
const ArgoCDNamespace = "argocd"

// InClusterServer is the destination server of an Application deployed to the cluster Argo CD
// runs in. Out of a cluster, ARGOCD_FAKE_IN_CLUSTER=true makes the application controller
// resolve it with $KUBECONFIG.
const InClusterServer = "https://kubernetes.default.svc"

// ApplicationGVR and AppProjectGVR are Argo CD's resources.
var (
	ApplicationGVR = schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "applications"}
	AppProjectGVR  = schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "appprojects"}
)

// ArgoCDDir returns <CacheDir>/argocd-<ArgoCDVersion>, holding the argocd binary (the
// application controller, the repo server and miniredis behind one wrapper main, see
// hack/build-binaries.sh) and crds/. When they are missing it runs hack/build-binaries.sh argocd
// (unless CMA_NO_BUILD=1; a cold build takes minutes); an error then wraps ErrUnavailable, so
// tests skip on it unless Required() (CI=true).
func ArgoCDDir() (string, error) {
	dir := filepath.Join(CacheDir(), "argocd-"+ArgoCDVersion)
	ok := func() bool {
		fi, err := os.Stat(filepath.Join(dir, "argocd"))
		_, errCRD := os.Stat(filepath.Join(dir, "crds", "application-crd.yaml"))
		return err == nil && fi.Mode()&0o111 != 0 && errCRD == nil
	}
	if ok() {
		return dir, nil
	}
	if os.Getenv("CMA_NO_BUILD") == "1" {
		return "", fmt.Errorf("%w: %s lacks argocd or crds/ and CMA_NO_BUILD=1", ErrUnavailable, dir)
	}
	script := filepath.Join(RepoRoot(), "hack", "build-binaries.sh")
	fmt.Fprintf(os.Stderr, "test/support/cluster: %s lacks Argo CD; building with %s argocd (about 3 minutes when cold)\n", dir, script)
	cmd := exec.Command("bash", script, "argocd")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.Env = append(os.Environ(), "CMA_CACHE="+CacheDir(), "ARGOCD_VERSION="+ArgoCDVersion)
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%w: building Argo CD %s: %v", ErrUnavailable, ArgoCDVersion, err)
	}
	if !ok() {
		return "", fmt.Errorf("%w: %s still lacks argocd or crds/ after %s", ErrUnavailable, dir, script)
	}
	return dir, nil
}

// ArgoCD is the real Argo CD application controller and repo server (with miniredis for their
// cache) run against a Cluster, as test/gitops and hack/demo (-argocd) use it: no API server,
// UI, Dex or ApplicationSet controller; Applications are created and synced through the
// Kubernetes API, as `kubectl apply` or the CLI's `--core` mode does. Every listener is on
// 127.0.0.1 (the controller's hard-coded 0.0.0.0 metrics listener is patched in the build).
type ArgoCD struct {
	// Dir holds the logs (redis.log, repo-server.log, application-controller.log) and the repo
	// server's TMPDIR.
	Dir string
	// ControllerLog and RepoServerLog are the two processes' logs.
	ControllerLog, RepoServerLog string

	c     *Cluster
	dyn   dynamic.Interface
	procs []*process // redis, repo server, application controller
}

// StartArgoCD installs the Application and AppProject CRDs, namespace argocd with argocd-cm,
// argocd-secret and the default AppProject, then starts miniredis, the repo server and the
// application controller (ARGOCD_FAKE_IN_CLUSTER=true, the cluster's admin kubeconfig) and
// waits until the controller has added the in-cluster cluster. Call Stop when done.
func StartArgoCD(c *Cluster) (*ArgoCD, error) {
	adir, err := ArgoCDDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(c.Dir, "argocd-")
	if err != nil {
		return nil, err
	}
	a := &ArgoCD{Dir: dir, c: c, ControllerLog: filepath.Join(dir, "application-controller.log"), RepoServerLog: filepath.Join(dir, "repo-server.log")}
	if a.dyn, err = dynamic.NewForConfig(c.AdminConfig); err != nil {
		return nil, err
	}
	if err := InstallCRDFiles(c, filepath.Join(adir, "crds", "application-crd.yaml"), filepath.Join(adir, "crds", "appproject-crd.yaml")); err != nil {
		return nil, fmt.Errorf("argocd CRDs: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := a.installObjects(ctx); err != nil {
		return nil, err
	}
	ports, err := FreePorts(5)
	if err != nil {
		return nil, err
	}
	redisAddr := "127.0.0.1:" + strconv.Itoa(ports[0])
	repoAddr := "127.0.0.1:" + strconv.Itoa(ports[1])
	tmp := filepath.Join(dir, "tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return nil, err
	}
	bin := filepath.Join(adir, "argocd")
	redis := &process{name: "argocd redis", bin: bin, logPath: filepath.Join(dir, "redis.log"), dir: dir, args: []string{"redis", "--addr", redisAddr}}
	repo := &process{name: "argocd repo-server", bin: bin, logPath: a.RepoServerLog, dir: dir,
		args: []string{"repo-server", "--address", "127.0.0.1", "--port", strconv.Itoa(ports[1]),
			"--metrics-address", "127.0.0.1", "--metrics-port", strconv.Itoa(ports[2]),
			"--disable-tls", "--redis", redisAddr, "--loglevel", "info"},
		env: []string{"ARGOCD_GPG_ENABLED=false", "ARGOCD_ASK_PASS_SOCK=" + filepath.Join(dir, "askpass.sock"), "TMPDIR=" + tmp,
			"ARGOCD_REPO_SERVER_LOGFORMAT=text"}}
	ctl := &process{name: "argocd application-controller", bin: bin, logPath: a.ControllerLog, dir: dir,
		args: []string{"application-controller", "--kubeconfig", c.KubeconfigPath, "--namespace", ArgoCDNamespace,
			"--repo-server", repoAddr, "--repo-server-plaintext", "--redis", redisAddr,
			"--metrics-port", strconv.Itoa(ports[3]), "--app-resync", "5", "--app-resync-jitter", "0",
			"--self-heal-timeout-seconds", "0", "--logformat", "text", "--loglevel", "info"},
		env: []string{"ARGOCD_FAKE_IN_CLUSTER=true", "KUBECONFIG=" + c.KubeconfigPath, "TMPDIR=" + tmp}}
	for _, step := range []struct {
		p    *process
		addr string
	}{{redis, redisAddr}, {repo, repoAddr}, {ctl, "127.0.0.1:" + strconv.Itoa(ports[3])}} {
		if err := step.p.start(); err != nil {
			a.Stop()
			return nil, err
		}
		a.procs = append(a.procs, step.p)
		if err := waitListening(step.p, step.addr, 90*time.Second); err != nil {
			a.Stop()
			return nil, err
		}
	}
	_ = os.WriteFile(filepath.Join(dir, "pids"), []byte(fmt.Sprint(a.PIDs())+"\n"), 0o644)
	return a, nil
}

// waitListening waits until addr accepts connections (the process must keep running).
func waitListening(p *process, addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			return nil
		}
		if !p.running() {
			_, werr := p.result()
			return fmt.Errorf("%s exited during start (%v)\n%s", p.name, werr, p.logTail(30))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %s not listening after %v\n%s", p.name, addr, timeout, p.logTail(30))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ArgoCDProject is the default AppProject: every repository, destination and kind.
const ArgoCDProject = `apiVersion: argoproj.io/v1alpha1
kind: AppProject
metadata:
  name: default
  namespace: argocd
spec:
  sourceRepos: ["*"]
  destinations: [{server: "*", namespace: "*"}]
  clusterResourceWhitelist: [{group: "*", kind: "*"}]
`

func (a *ArgoCD) installObjects(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(a.c.AdminConfig)
	if err != nil {
		return err
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ArgoCDNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", ArgoCDNamespace, err)
	}
	partOf := map[string]string{"app.kubernetes.io/part-of": "argocd"}
	// The controller's settings informer only sees argocd-cm and argocd-secret with this label.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "argocd-cm", Namespace: ArgoCDNamespace, Labels: partOf}}
	if _, err := cs.CoreV1().ConfigMaps(ArgoCDNamespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create argocd-cm: %w", err)
	}
	// Without server.secretkey the controller never adds the in-cluster cluster.
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "argocd-secret", Namespace: ArgoCDNamespace, Labels: partOf},
		StringData: map[string]string{"server.secretkey": "configmap-attacher-test-only"}}
	if _, err := cs.CoreV1().Secrets(ArgoCDNamespace).Create(ctx, sec, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create argocd-secret: %w", err)
	}
	f := filepath.Join(a.Dir, "appproject-default.yaml")
	if err := os.WriteFile(f, []byte(ArgoCDProject), 0o644); err != nil {
		return err
	}
	return Kubectl(a.c, "apply", "--server-side", "-f", f)
}

// PIDs are the PIDs of miniredis, the repo server and the application controller.
func (a *ArgoCD) PIDs() []int {
	var out []int
	for _, p := range a.procs {
		out = append(out, p.PID())
	}
	return out
}

// ControllerPID is the application controller's PID.
func (a *ArgoCD) ControllerPID() int {
	if len(a.procs) < 3 {
		return 0
	}
	return a.procs[2].PID()
}

// Running reports whether all three processes are alive.
func (a *ArgoCD) Running() bool {
	if len(a.procs) < 3 {
		return false
	}
	for _, p := range a.procs {
		if !p.running() {
			return false
		}
	}
	return true
}

// Stop stops the application controller, the repo server and miniredis (SIGTERM, SIGKILL
// after 10 s), by the PIDs it started. Safe to call twice and on nil.
func (a *ArgoCD) Stop() {
	if a == nil {
		return
	}
	for i := len(a.procs) - 1; i >= 0; i-- {
		a.procs[i].stop(10 * time.Second)
	}
}

// ControllerLogTail is the last n lines of the application controller's log.
func (a *ArgoCD) ControllerLogTail(n int) string {
	if len(a.procs) < 3 {
		return ""
	}
	return a.procs[2].logTail(n)
}

// ApplicationSpec is what CreateApplication puts into an Application.
type ApplicationSpec struct {
	Name      string // the Application's name (in namespace argocd)
	RepoURL   string // file:///… (GitRepo.URL)
	Path      string // the directory in the repository
	Namespace string // the destination namespace
	// AutoSync turns on syncPolicy.automated with prune (selfHeal off); false: manual syncs
	// only (Sync).
	AutoSync bool
	// SyncOptions are spec.syncPolicy.syncOptions (e.g. "PruneLast=true").
	SyncOptions []string
}

// CreateApplication creates the Application (directory source, HEAD, the in-cluster
// destination, project default).
func (a *ArgoCD) CreateApplication(ctx context.Context, s ApplicationSpec) error {
	policy := map[string]any{}
	if s.AutoSync {
		policy["automated"] = map[string]any{"prune": true, "selfHeal": false}
	}
	if len(s.SyncOptions) > 0 {
		opts := make([]any, len(s.SyncOptions))
		for i, o := range s.SyncOptions {
			opts[i] = o
		}
		policy["syncOptions"] = opts
	}
	app := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
		"metadata": map[string]any{"name": s.Name, "namespace": ArgoCDNamespace},
		"spec": map[string]any{
			"project":     "default",
			"source":      map[string]any{"repoURL": s.RepoURL, "targetRevision": "HEAD", "path": s.Path, "directory": map[string]any{}},
			"destination": map[string]any{"server": InClusterServer, "namespace": s.Namespace},
			"syncPolicy":  policy,
		},
	}}
	if _, err := a.dyn.Resource(ApplicationGVR).Namespace(ArgoCDNamespace).Create(ctx, app, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create Application %s: %w", s.Name, err)
	}
	return nil
}

// DeleteApplication deletes the Application without its resources (no finalizer is set).
func (a *ArgoCD) DeleteApplication(ctx context.Context, name string) error {
	err := a.dyn.Resource(ApplicationGVR).Namespace(ArgoCDNamespace).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete Application %s: %w", name, err)
	}
	return nil
}

// Refresh asks for a fresh comparison with Git (annotation argocd.argoproj.io/refresh=normal,
// which also bypasses the repo server's cache of HEAD), as `argocd app get --refresh` does.
func (a *ArgoCD) Refresh(ctx context.Context, name string) error {
	patch := []byte(`{"metadata":{"annotations":{"argocd.argoproj.io/refresh":"normal"}}}`)
	if _, err := a.dyn.Resource(ApplicationGVR).Namespace(ArgoCDNamespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("refresh Application %s: %w", name, err)
	}
	return nil
}

// Sync starts a manual sync of the Application to HEAD (with prune when prune), as `argocd app
// sync` does: by writing its operation field.
func (a *ArgoCD) Sync(ctx context.Context, name string, prune bool) error {
	patch := fmt.Sprintf(`{"operation":{"initiatedBy":{"username":"configmap-attacher-test"},"sync":{"prune":%t}}}`, prune)
	if _, err := a.dyn.Resource(ApplicationGVR).Namespace(ArgoCDNamespace).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("sync Application %s: %w", name, err)
	}
	return nil
}

// AppResource is one entry of status.resources (what the app manages) or of the last sync's
// status.operationState.syncResult.resources (what the sync did to it).
type AppResource struct {
	Group     string `json:"group"`
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Status: in status.resources the object's sync status (Synced, OutOfSync); in a sync
	// result what happened (Synced, Pruned, PruneSkipped, SyncFailed).
	Status          string `json:"status"`
	RequiresPruning bool   `json:"requiresPruning"`
	Message         string `json:"message"`
	HookType        string `json:"hookType"`
	HookPhase       string `json:"hookPhase"`
	SyncPhase       string `json:"syncPhase"`
	Health          *struct {
		Status string `json:"status"`
	} `json:"health"`
}

// String is "Kind/name status".
func (r AppResource) String() string {
	s := r.Kind + "/" + r.Name + " " + r.Status
	if r.RequiresPruning {
		s += " requiresPruning"
	}
	if r.HookType != "" {
		s += " hook=" + r.HookType + ":" + r.HookPhase
	}
	return s
}

// AppStatus is the part of an Application's status the tests read.
type AppStatus struct {
	Sync struct {
		Status   string `json:"status"`
		Revision string `json:"revision"`
	} `json:"sync"`
	Health struct {
		Status string `json:"status"`
	} `json:"health"`
	Resources      []AppResource `json:"resources"`
	OperationState *struct {
		Phase      string       `json:"phase"`
		Message    string       `json:"message"`
		StartedAt  *metav1.Time `json:"startedAt"`
		FinishedAt *metav1.Time `json:"finishedAt"`
		SyncResult *struct {
			Revision  string        `json:"revision"`
			Resources []AppResource `json:"resources"`
		} `json:"syncResult"`
	} `json:"operationState"`
	Conditions []struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"conditions"`
	ReconciledAt *metav1.Time `json:"reconciledAt"`
}

// Succeeded reports whether the last operation synced revision and succeeded.
func (s *AppStatus) Succeeded(revision string) bool {
	return s.OperationState != nil && s.OperationState.Phase == "Succeeded" && s.OperationState.SyncResult != nil &&
		s.OperationState.SyncResult.Revision == revision
}

// SyncResult lists the last operation's resources ("" kinds when none).
func (s *AppStatus) SyncResult() []AppResource {
	if s.OperationState == nil || s.OperationState.SyncResult == nil {
		return nil
	}
	return s.OperationState.SyncResult.Resources
}

// Resource returns the status.resources entry of kind/name (nil when the app does not manage it).
func (s *AppStatus) Resource(kind, name string) *AppResource {
	for i := range s.Resources {
		if s.Resources[i].Kind == kind && s.Resources[i].Name == name {
			return &s.Resources[i]
		}
	}
	return nil
}

// Summary is one line: sync status, health, revision, operation phase and message, conditions.
func (s *AppStatus) Summary() string {
	op := "none"
	if s.OperationState != nil {
		op = s.OperationState.Phase + " " + strconv.Quote(s.OperationState.Message)
		if s.OperationState.SyncResult != nil {
			op += " rev " + short(s.OperationState.SyncResult.Revision)
		}
	}
	var conds []string
	for _, c := range s.Conditions {
		conds = append(conds, c.Type+": "+c.Message)
	}
	var res []string
	for _, r := range s.Resources {
		res = append(res, r.String())
	}
	sort.Strings(res)
	return fmt.Sprintf("sync=%s rev=%s health=%s operation=%s conditions=%v resources=%v", s.Sync.Status, short(s.Sync.Revision),
		s.Health.Status, op, conds, res)
}

func short(rev string) string {
	if len(rev) > 8 {
		return rev[:8]
	}
	return rev
}

// App reads the Application's status.
func (a *ArgoCD) App(ctx context.Context, name string) (*AppStatus, error) {
	u, err := a.dyn.Resource(ApplicationGVR).Namespace(ArgoCDNamespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get Application %s: %w", name, err)
	}
	b, err := json.Marshal(u.Object["status"])
	if err != nil {
		return nil, err
	}
	st := &AppStatus{}
	if err := json.Unmarshal(b, st); err != nil {
		return nil, fmt.Errorf("status of Application %s: %w", name, err)
	}
	return st, nil
}

// WaitSynced waits until the Application's last operation synced revision (a commit SHA) and
// succeeded. With refresh it first asks for a refresh, and asks again every 10 s while the
// revision has not been synced: a refresh annotation the controller has not consumed yet
// makes a second one a no-op, and the periodic reconcile reads HEAD from the repo server's
// cache.
func (a *ArgoCD) WaitSynced(ctx context.Context, name, revision string, refresh bool) (*AppStatus, error) {
	for {
		if refresh {
			if err := a.Refresh(ctx, name); err != nil {
				return nil, err
			}
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		st, err := a.WaitApp(wctx, name, "sync of revision "+short(revision), func(s *AppStatus) bool { return s.Succeeded(revision) })
		cancel()
		if err == nil || ctx.Err() != nil {
			return st, err
		}
	}
}

// WaitApp polls the Application's status every 100 ms until cond holds or ctx ends; the error
// then carries the last status.
func (a *ArgoCD) WaitApp(ctx context.Context, name, what string, cond func(*AppStatus) bool) (*AppStatus, error) {
	var last *AppStatus
	var lastErr error
	for {
		st, err := a.App(ctx, name)
		if err == nil {
			last = st
			if cond(st) {
				return st, nil
			}
		} else {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			desc := "no status"
			if last != nil {
				desc = last.Summary()
			}
			return last, fmt.Errorf("waiting for Application %s: %s: %w (last: %s; last error %v)\n%s", name, what, ctx.Err(), desc, lastErr, a.ControllerLogTail(15))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// GitRepo is a non-bare Git repository in a local directory that Argo CD reads through a
// file:// URL (as Argo CD's own end-to-end tests do; go-git runs the system git-upload-pack).
type GitRepo struct {
	Dir string
	mu  sync.Mutex
}

// NewGitRepo runs git init in dir (created if needed) on branch main.
func NewGitRepo(dir string) (*GitRepo, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	r := &GitRepo{Dir: dir}
	if _, err := r.git("init", "-q", "-b", "main"); err != nil {
		return nil, err
	}
	return r, nil
}

// URL is the repository's file:// URL.
func (r *GitRepo) URL() string { return "file://" + r.Dir }

func (r *GitRepo) git(args ...string) (string, error) {
	cmd := exec.Command("git", append([]string{"-c", "user.name=configmap-attacher test", "-c", "user.email=test@configmap-attacher.invalid",
		"-c", "commit.gpgsign=false"}, args...)...)
	cmd.Dir = r.Dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// Commit replaces the content of directory path with files (name -> content), commits it all
// with message and returns the commit's SHA. Another path's files are left alone.
func (r *GitRepo) Commit(path string, files map[string]string, message string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := filepath.Join(r.Dir, path)
	if err := os.RemoveAll(d); err != nil {
		return "", err
	}
	if err := os.MkdirAll(d, 0o755); err != nil {
		return "", err
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(d, name), []byte(content), 0o644); err != nil {
			return "", err
		}
	}
	if _, err := r.git("add", "-A", "."); err != nil {
		return "", err
	}
	if _, err := r.git("commit", "-q", "--allow-empty", "-m", message); err != nil {
		return "", err
	}
	sha, err := r.git("rev-parse", "HEAD")
	if err != nil {
		return "", err
	}
	if len(sha) != 40 {
		return "", errors.New("git rev-parse HEAD: " + sha)
	}
	return sha, nil
}
