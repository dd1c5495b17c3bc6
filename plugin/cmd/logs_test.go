package cmd

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"k8s.io/klog/v2"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	"github.com/configmap-attacher/configmap-attacher/plugin/clientset"
)

// klogProbe logs as client-go does (klog), from where each command builds its clients: by
// then the command has routed klog into its logger.
func klogProbe() (clientset.Clients, error) {
	klog.InfoS("attempting to acquire leader lease", "lease", "ns/probe")
	klog.Warning("probe warning from client-go")
	klog.ErrorS(errors.New(`configmaps is forbidden: User "x" cannot list resource "configmaps"`), "Failed to watch")
	return clientset.Clients{}, errors.New("no cluster in this test")
}

// Each mode's client-go lines (klog) come out through the mode's logger, marked
// logger=client-go: with -log-format json every stderr line of the Job is JSON; audit and
// doctor (text logs) print them as their own log lines.
func TestKlogRoutedIntoEachMode(t *testing.T) {
	defer klog.ClearLogger()
	var errb bytes.Buffer
	newClients := func(plugin.ClientOptions) (clientset.Clients, error) { return klogProbe() }

	code := (&Job{Stderr: &errb, Clients: Clients{Typed: newClients}}).Main([]string{"-rollout", "web", "-namespace", "shop", "-configmaps", "cfg", "-log-format", "json"})
	if code != ExitFail {
		t.Errorf("job: exit %d", code)
	}
	var fromKlog int
	for _, line := range strings.Split(strings.TrimSpace(errb.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Errorf("job -log-format json: a stderr line is not JSON (%v): %s", err, line)
			continue
		}
		if m["logger"] == "client-go" {
			fromKlog++
		}
	}
	if fromKlog != 3 || !strings.Contains(errb.String(), `"error":"configmaps is forbidden`) || !strings.Contains(errb.String(), `"msg":"attempting to acquire leader lease"`) {
		t.Errorf("job: %d client-go lines, want 3:\n%s", fromKlog, errb.String())
	}

	errb.Reset()
	(&Audit{Stderr: &errb, Clients: Clients{Typed: newClients}}).Main([]string{"-A", "-log-level", "info"})
	for _, want := range []string{`level=info msg="attempting to acquire leader lease" lease=ns/probe logger=client-go`, `level=error msg="Failed to watch" error="configmaps is forbidden`} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("audit: stderr lacks %q:\n%s", want, errb.String())
		}
	}

	errb.Reset()
	(&Doctor{Stderr: &errb, Clients: Clients{Typed: newClients}}).Main([]string{"-mode", "step"})
	// klog has no warning level in logr: its warnings arrive at info.
	if s := errb.String(); !strings.Contains(s, `level=info msg="probe warning from client-go" logger=client-go`) || !strings.Contains(s, `level=error msg="Failed to watch"`) {
		t.Errorf("doctor: stderr lacks client-go's lines:\n%s", s)
	}
}
