package rpc_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"

	"github.com/configmap-attacher/configmap-attacher/plugin/step"

	rolloutsrpc "github.com/argoproj/argo-rollouts/rollout/steps/plugin/rpc"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	hclog "github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	appsv1 "k8s.io/api/apps/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// cluster.RolloutsHandshake is copied from argo-rollouts rollout/steps/plugin/client/client.go
// (v1.10.2), written out here rather than taken from rpc.Handshake so that a drift in
// rpc.Handshake makes the tests fail.

// pluginBinary is the real binary, built as make build does, once per source tree
// (cluster.PluginBinary).
func pluginBinary(t *testing.T) string {
	t.Helper()
	p, err := cluster.PluginBinary()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// apiRequest is one request the fake apiserver received.
type apiRequest struct {
	Method, Path, Query, ContentType, UserAgent string
	Body                                        []byte
}

func (r apiRequest) String() string { return r.Method + " " + r.Path }

// fakeAPIServer answers the three requests a Run makes: the ReplicaSet list and one
// ownerReferences patch per ConfigMap or Secret, applying the patch by owner UID.
type fakeAPIServer struct {
	*httptest.Server
	t       *testing.T
	mu      sync.Mutex
	reqs    []apiRequest
	objects map[string]runtime.Object // by request path
}

func newFakeAPIServer(t *testing.T) *fakeAPIServer {
	f := &fakeAPIServer{t: t, objects: map[string]runtime.Object{
		"/api/v1/namespaces/" + testNS + "/configmaps/" + cmName:  testConfigMap(),
		"/api/v1/namespaces/" + testNS + "/secrets/" + secretName: testSecret(),
	}}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serveHTTP)) // 127.0.0.1, plain HTTP
	t.Cleanup(f.Close)
	return f
}

func (f *fakeAPIServer) requests() []apiRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]apiRequest(nil), f.reqs...)
}

func (f *fakeAPIServer) serveHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reqs = append(f.reqs, apiRequest{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery,
		ContentType: r.Header.Get("Content-Type"), UserAgent: r.UserAgent(), Body: body})

	reply := func(code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(v)
	}
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/apis/apps/v1/namespaces/"+testNS+"/replicasets":
		reply(http.StatusOK, &appsv1.ReplicaSetList{
			TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "ReplicaSetList"},
			ListMeta: metav1.ListMeta{ResourceVersion: "100"},
			Items:    []appsv1.ReplicaSet{*testReplicaSet()},
		})
		return
	case r.Method == http.MethodGet && emptyLists[r.URL.Path] != "":
		// The namespace's other users of config (none here): every user counts.
		reply(http.StatusOK, map[string]any{"apiVersion": listAPIVersion(r.URL.Path), "kind": emptyLists[r.URL.Path], "metadata": map[string]any{"resourceVersion": "100"}, "items": []any{}})
		return
	case r.Method == http.MethodPatch && f.objects[r.URL.Path] != nil:
		var patch struct {
			Metadata struct {
				OwnerReferences []metav1.OwnerReference `json:"ownerReferences"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(body, &patch); err != nil {
			reply(http.StatusUnprocessableEntity, &metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
				Status: metav1.StatusFailure, Code: http.StatusUnprocessableEntity, Reason: metav1.StatusReasonInvalid, Message: err.Error()})
			return
		}
		obj := f.objects[r.URL.Path]
		meta := obj.(metav1.Object)
		refs := meta.GetOwnerReferences()
	next:
		for _, add := range patch.Metadata.OwnerReferences {
			for i := range refs {
				if refs[i].UID == add.UID {
					refs[i] = add
					continue next
				}
			}
			refs = append(refs, add)
		}
		meta.SetOwnerReferences(refs)
		reply(http.StatusOK, obj)
		return
	}
	reply(http.StatusNotFound, &metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
		Status: metav1.StatusFailure, Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound,
		Message: fmt.Sprintf("fake apiserver: no route for %s %s", r.Method, r.URL.Path)})
}

// emptyLists are the lists of the namespace's users the step reads besides its ReplicaSets.
var emptyLists = map[string]string{
	"/apis/apps/v1/namespaces/" + testNS + "/statefulsets":        "StatefulSetList",
	"/apis/apps/v1/namespaces/" + testNS + "/daemonsets":          "DaemonSetList",
	"/apis/apps/v1/namespaces/" + testNS + "/controllerrevisions": "ControllerRevisionList",
	"/apis/batch/v1/namespaces/" + testNS + "/jobs":               "JobList",
	"/apis/batch/v1/namespaces/" + testNS + "/cronjobs":           "CronJobList",
	"/api/v1/namespaces/" + testNS + "/pods":                      "PartialObjectMetadataList",
}

func listAPIVersion(path string) string {
	switch {
	case strings.HasPrefix(path, "/apis/apps/"):
		return "apps/v1"
	case strings.HasPrefix(path, "/apis/batch/"):
		return "batch/v1"
	}
	return "meta.k8s.io/v1"
}

func writeKubeconfig(t *testing.T, server string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: fake
  cluster:
    server: %s
users:
- name: plugin
  user:
    token: not-a-secret
contexts:
- name: fake
  context:
    cluster: fake
    user: plugin
    namespace: default
current-context: fake
`, server)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestBinaryServesTheControllerProtocol(t *testing.T) {
	bin := pluginBinary(t)
	api := newFakeAPIServer(t)
	kubeconfig := writeKubeconfig(t, api.URL)

	// Exactly the controller's client configuration (rollout/steps/plugin/client/client.go).
	c, p := cluster.StartStepPlugin(t, exec.Command(bin, "--kubeconfig", kubeconfig), nil)

	if err := p.InitPlugin(); err.HasError() {
		t.Fatalf("InitPlugin: %v", err)
	}
	if n := len(api.requests()); n != 0 {
		t.Errorf("InitPlugin made %d API requests, want none (the client is built lazily)", n)
	}

	res, rerr := p.Run(testRollout(), stepContext(stepConfig))
	if rerr.HasError() {
		t.Fatalf("Run: RpcError %q; apiserver saw %v", rerr.ErrorString, api.requests())
	}
	if res.Phase != types.PhaseSuccessful || res.Message != wantMessage {
		t.Fatalf("Run = phase %q message %q, want %q %q", res.Phase, res.Message, types.PhaseSuccessful, wantMessage)
	}
	var st step.Status
	if err := json.Unmarshal(res.Status, &st); err != nil || !bytes.HasPrefix(res.Status, []byte("{")) {
		t.Fatalf("Status %s is not a JSON object: %v", res.Status, err)
	}
	if st.ReplicaSet != rsName || st.ReplicaSetUID != string(rsUID) || strings.Join(st.ConfigMaps, ",") != cmName || strings.Join(st.Secrets, ",") != secretName {
		t.Errorf("Status = %s", res.Status)
	}

	// The Event is sent in the background after Run returns: wait for it (bounded).
	var reqs []apiRequest
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		reqs = api.requests()
		if len(reqs) >= 12 || time.Now().After(deadline) {
			break
		}
	}
	var got []string
	for _, r := range reqs {
		got = append(got, r.String())
	}
	sort.Strings(got)
	// The Rollout's own ReplicaSets, the controller's Lease (absent here: a step-only
	// install), then, since no controller maintains the objects, the namespace's users.
	want := []string{
		"GET /api/v1/namespaces/" + testNS + "/pods",
		"GET /apis/apps/v1/namespaces/" + testNS + "/controllerrevisions",
		"GET /apis/apps/v1/namespaces/" + testNS + "/daemonsets",
		"GET /apis/apps/v1/namespaces/" + testNS + "/replicasets",
		"GET /apis/apps/v1/namespaces/" + testNS + "/replicasets",
		"GET /apis/apps/v1/namespaces/" + testNS + "/statefulsets",
		"GET /apis/batch/v1/namespaces/" + testNS + "/cronjobs",
		"GET /apis/batch/v1/namespaces/" + testNS + "/jobs",
		"GET /apis/coordination.k8s.io/v1/namespaces/configmap-attacher/leases/configmap-attacher",
		"PATCH /api/v1/namespaces/" + testNS + "/configmaps/" + cmName,
		"PATCH /api/v1/namespaces/" + testNS + "/secrets/" + secretName,
		// The Normal ConfigAttached event on the Rollout.
		"POST /api/v1/namespaces/" + testNS + "/events",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("apiserver requests:\n  %s\nwant exactly:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	ownLists := 0
	for _, r := range reqs {
		if !strings.HasPrefix(r.UserAgent, "configmap-attacher/") {
			t.Errorf("%s: User-Agent %q, want configmap-attacher/<version>", r, r.UserAgent)
		}
		if r.Method == http.MethodGet {
			// Namespace-wide, in pages: every user of an object counts, whatever its labels;
			// only the Rollout's own ReplicaSets are found by its selector.
			q, err := url.ParseQuery(r.Query)
			if err != nil {
				t.Errorf("%s: query %q: %v", r, r.Query, err)
			}
			if sel := q.Get("labelSelector"); sel != "" && strings.HasSuffix(r.Path, "/replicasets") {
				ownLists++
				q.Del("labelSelector")
			}
			q.Del("limit")
			if len(q) > 0 {
				t.Errorf("%s: query %q, want a whole-namespace list (pages allowed)", r, r.Query)
			}
			continue
		}
		if r.Method == http.MethodPost { // the event
			continue
		}
		if r.ContentType != "application/strategic-merge-patch+json" {
			t.Errorf("%s: Content-Type %q, want application/strategic-merge-patch+json", r, r.ContentType)
		}
		checkPatchBody(t, r)
	}
	if ownLists != 1 {
		t.Errorf("%d lists of ReplicaSets by the Rollout's selector, want 1 (its own, first)", ownLists)
	}
	cmPath := "/api/v1/namespaces/" + testNS + "/configmaps/" + cmName
	checkAttached(t, "ConfigMap", api.objects[cmPath].(metav1.Object).GetOwnerReferences(), otherOwner())

	for _, op := range []struct {
		name string
		call func() (types.RpcStepResult, types.RpcError)
	}{
		{"Abort", func() (types.RpcStepResult, types.RpcError) { return p.Abort(testRollout(), stepContext(stepConfig)) }},
		{"Terminate", func() (types.RpcStepResult, types.RpcError) {
			return p.Terminate(testRollout(), stepContext(stepConfig))
		}},
	} {
		res, rerr := op.call()
		if rerr.HasError() || res.Phase != types.PhaseSuccessful || res.Message == "" {
			t.Errorf("%s = phase %q message %q error %q, want Successful with a message", op.name, res.Phase, res.Message, rerr.ErrorString)
		}
	}
	if n := len(api.requests()); n != len(reqs) {
		t.Errorf("Abort/Terminate made %d API requests, want none", n-len(reqs))
	}

	c.Kill()
	if !c.Exited() {
		t.Error("plugin process still running after Kill")
	}
}

// checkPatchBody asserts the patch is exactly {"metadata":{"ownerReferences":[<our ref>]}}.
func checkPatchBody(t *testing.T, r apiRequest) {
	t.Helper()
	var body map[string]map[string][]map[string]any
	if err := json.Unmarshal(r.Body, &body); err != nil {
		t.Errorf("%s: body %s is not {metadata: {ownerReferences: [...]}}: %v", r, r.Body, err)
		return
	}
	if len(body) != 1 || len(body["metadata"]) != 1 || len(body["metadata"]["ownerReferences"]) != 1 {
		t.Errorf("%s: body %s, want only metadata.ownerReferences with one entry", r, r.Body)
		return
	}
	ref := body["metadata"]["ownerReferences"][0]
	var keys []string
	for k := range ref {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	// No controller field: an entry already there with the same UID keeps what it has.
	if strings.Join(keys, ",") != "apiVersion,kind,name,uid" {
		t.Errorf("%s: owner reference has fields %v, want apiVersion,kind,name,uid (no controller, no blockOwnerDeletion)", r, keys)
	}
	var typed struct {
		Metadata struct {
			OwnerReferences []metav1.OwnerReference `json:"ownerReferences"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(r.Body, &typed); err != nil || !apiequality.Semantic.DeepEqual(typed.Metadata.OwnerReferences[0], wantOwnerRef()) {
		t.Errorf("%s: owner reference %s, want %s", r, r.Body, mustJSON(t, wantOwnerRef()))
	}
}

// TestBinaryLogsReachOriginalStderr: the plugin's log lines, including those written while
// serving (after go-plugin swapped os.Stderr for a pipe the controller never reads), must go
// to the process's real stderr, which go-plugin's client copies to ClientConfig.Stderr.
func TestBinaryLogsReachOriginalStderr(t *testing.T) {
	bin := pluginBinary(t)
	api := newFakeAPIServer(t)
	var stderr cluster.SyncBuffer
	cfg := cluster.StepPluginClientConfig(exec.Command(bin, "--kubeconfig", writeKubeconfig(t, api.URL), "--log-level", "debug"))
	cfg.Stderr, cfg.Logger = &stderr, hclog.NewNullLogger()
	c, p := cluster.DispenseStepPlugin(t, cfg)
	if err := p.InitPlugin(); err.HasError() {
		t.Fatalf("InitPlugin: %v", err)
	}
	if res, rerr := p.Run(testRollout(), stepContext(stepConfig)); rerr.HasError() || res.Phase != types.PhaseSuccessful {
		t.Fatalf("Run = phase %q message %q error %q", res.Phase, res.Message, rerr.ErrorString)
	}
	// Kill waits for go-plugin's stderr copier to finish: everything written is in the buffer.
	c.Kill()
	out := stderr.String()
	for _, want := range []string{
		"configmap-attacher step plugin initialised", // info, from InitPlugin
		"level=debug",               // --log-level debug took effect
		"owner references in place", // debug, from the patches
		`msg="` + wantMessage + `"`, // info, the Run result
		"replicaset=" + rsName,      // with its fields
	} {
		if !strings.Contains(out, want) {
			t.Errorf("plugin stderr lacks %q; got:\n%s", want, out)
		}
	}
}

func envWithoutCookie() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, cluster.RolloutsHandshake.MagicCookieKey+"=") {
			env = append(env, kv)
		}
	}
	return env
}

// runBinary runs the binary by hand and returns stdout, stderr and the exit code.
func runBinary(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, pluginBinary(t), args...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return stdout.String(), stderr.String(), 0
	case errors.As(err, &exit) && ctx.Err() == nil:
		return stdout.String(), stderr.String(), exit.ExitCode()
	default:
		t.Fatalf("running %q: %v (stderr %s)", args, err, stderr.String())
		return "", "", -1
	}
}

func TestBinaryRejectsInvalidArgs(t *testing.T) {
	bin := pluginBinary(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--qps", "-1"}, "--qps"},
		{[]string{"--concurrency", "0"}, "--concurrency"},
		{[]string{"--log-level", "loud"}, `log level \"loud\"`},
		{[]string{"--bogus"}, "flag provided but not defined: -bogus"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			// As the controller starts it: the start fails, the reason is on stderr.
			var stderr cluster.SyncBuffer
			c := goplugin.NewClient(&goplugin.ClientConfig{
				HandshakeConfig: cluster.RolloutsHandshake,
				Plugins:         map[string]goplugin.Plugin{"RpcStepPlugin": &rolloutsrpc.RpcStepPlugin{}},
				Cmd:             exec.Command(bin, tc.args...),
				Managed:         true,
				Stderr:          &stderr,
				Logger:          hclog.NewNullLogger(),
				StartTimeout:    10 * time.Second,
			})
			_, err := c.Client()
			c.Kill() // waits for the stderr copier
			if err == nil {
				t.Fatalf("plugin started with args %q", tc.args)
			}
			if strings.Contains(err.Error(), "timeout") {
				t.Errorf("start failed by timeout, want a prompt exit: %v", err)
			}
			if out := stderr.String(); !strings.Contains(out, tc.want) {
				t.Errorf("stderr lacks %q; got:\n%s", tc.want, out)
			}

			// By hand with the cookie: exit code 2, message on stderr, nothing on stdout
			// (stdout is go-plugin's handshake channel).
			env := append(envWithoutCookie(), cluster.RolloutsHandshake.MagicCookieKey+"="+cluster.RolloutsHandshake.MagicCookieValue)
			stdout, errOut, code := runBinary(t, env, tc.args...)
			if code != 2 {
				t.Errorf("exit code %d, want 2", code)
			}
			if !strings.Contains(errOut, tc.want) {
				t.Errorf("stderr lacks %q; got:\n%s", tc.want, errOut)
			}
			if stdout != "" {
				t.Errorf("stdout = %q, want nothing", stdout)
			}
		})
	}
}

func TestBinaryWithoutCookieIsTheCommandLine(t *testing.T) {
	stdout, stderr, code := runBinary(t, envWithoutCookie(), "-version")
	if code != 0 {
		t.Errorf("-version: exit code %d, want 0 (stderr %q)", code, stderr)
	}
	if !strings.HasPrefix(stdout, "configmap-attacher ") || strings.Count(stdout, "\n") != 1 || len(strings.TrimSpace(stdout)) <= len("configmap-attacher ") {
		t.Errorf("-version printed %q, want \"configmap-attacher <version>\\n\"", stdout)
	}

	// Without flags it is the command line's usage error, not go-plugin's
	// "This binary is a plugin" (exit 1).
	stdout, stderr, code = runBinary(t, envWithoutCookie())
	if code != 2 || !strings.Contains(stderr, "-rollout is required") || strings.Contains(stderr, "This binary is a plugin") {
		t.Errorf("no args: exit %d, stdout %q, stderr %q; want exit 2 with the command line's usage error", code, stdout, stderr)
	}
}
