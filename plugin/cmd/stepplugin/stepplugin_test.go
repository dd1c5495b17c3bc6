package stepplugin

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	"k8s.io/klog/v2"

	"github.com/configmap-attacher/configmap-attacher/plugin"
)

func parseStepArgs(args []string, stderr io.Writer) (stepPluginOptions, error) {
	return (&Command{Stderr: stderr}).parse(args)
}

func TestStepPluginArgs(t *testing.T) {
	o, err := parseStepArgs([]string{"--kubeconfig", "/k", "--qps", "7.5", "--burst", "9", "--log-level", "debug", "--log-format", "json", "--concurrency", "3"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.Client.Kubeconfig != "/k" || o.Client.QPS != 7.5 || o.Client.Burst != 9 || o.LogLevel != "debug" || o.LogFormat != "json" || o.Concurrency != 3 {
		t.Errorf("parse = %+v", o)
	}
	o, err = parseStepArgs(nil, io.Discard)
	if err != nil || o.Client.QPS != plugin.DefaultQPS || o.Client.Burst != plugin.DefaultBurst || o.Concurrency <= 0 || o.LogLevel != "info" {
		t.Errorf("parse(nil) = %+v, %v", o, err)
	}
	// The administrator's policy.
	o, err = parseStepArgs([]string{"--require-opt-in", "--opt-in-selector", "team=shop,revisioned=yes"}, io.Discard)
	if err != nil || !o.Policy.RequireOptIn || o.Policy.OptIn.String() != "revisioned=yes,team=shop" {
		t.Errorf("policy args = %+v, %v", o.Policy, err)
	}
	if o, _ := parseStepArgs(nil, io.Discard); o.Policy.RequireOptIn || o.Policy.OptIn.String() != plugin.OptInLabel+"=true" {
		t.Errorf("default policy = %+v", o.Policy)
	}
	// Every problem at once: the flag package's in the order of the args, then the values in flag order.
	_, err = parseStepArgs([]string{"--qps", "0", "--burst", "0", "--opt-in-selector", ""}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--opt-in-selector \"\": selects every object without a given label (or everything): give a label objects must carry, such as configmap-attacher/revisioned=true; --qps 0: must be positive; --burst 0: must be positive") {
		t.Errorf("all problems: %v", err)
	}
	for _, args := range [][]string{{"--qps", "-1"}, {"--qps", "0"}, {"--burst", "0"}, {"--concurrency", "0"}, {"--bogus"}, {"extra"}, {"--opt-in-selector", "a in (b"},
		{"--log-level", "loud"}, {"--log-format", "xml"}, {"---x"}, {"-help"}} {
		var stderr bytes.Buffer
		if _, err := parseStepArgs(args, &stderr); err == nil {
			t.Errorf("parse(%q) accepted", args)
		} else if !strings.Contains(err.Error(), "argo-rollouts-config") {
			t.Errorf("parse(%q) error %q does not point at argo-rollouts-config", args, err)
		}
	}
}

// The flag package's own problems (an unknown flag, a bad value, a bad flag syntax) do not hide
// the others: parsing goes on after each, the values are checked in flag order, and the usage
// is printed once.
func TestStepPluginArgsEveryProblem(t *testing.T) {
	var stderr bytes.Buffer
	_, err := parseStepArgs([]string{"--bogus", "--qps", "fast", "---x", "--burst", "0", "--opt-in-selector", "!a", "--log-format", "xml", "--log-level", "loud", "--concurrency", "-2", "extra"}, &stderr)
	want := "plugin args in argo-rollouts-config: " +
		"flag provided but not defined: -bogus; " +
		`--qps "fast": parse error; ` +
		"bad flag syntax: ---x; " +
		`--opt-in-selector "!a": ` + plugin.NotPositive + "; " +
		`unexpected argument "extra"; ` +
		"--burst 0: must be positive; " +
		`log level "loud": use debug, info, warn or error; ` +
		`log format "xml": use text or json; ` +
		"--concurrency -2: must be positive"
	if err == nil || err.Error() != want {
		t.Errorf("error\n%v\nwant\n%s", err, want)
	}
	if n := strings.Count(stderr.String(), "Usage:"); n != 1 {
		t.Errorf("usage printed %d times, want once:\n%s", n, stderr.String())
	}
	if !strings.Contains(stderr.String(), "-require-opt-in") {
		t.Errorf("usage lacks the flags:\n%s", stderr.String())
	}
	// Valid args print nothing.
	stderr.Reset()
	if _, err := parseStepArgs([]string{"--log-level", "debug"}, &stderr); err != nil || stderr.Len() != 0 {
		t.Errorf("valid args: %v, stderr %q", err, stderr.String())
	}
}

// client-go's klog lines reach the plugin's stderr through its logger, in its format (JSON
// with --log-format json), marked logger=client-go; nothing else of klog's is written.
func TestKlogRoutedToPluginStderr(t *testing.T) {
	defer klog.ClearLogger()
	var errb bytes.Buffer
	log := logrus.New()
	log.SetOutput(&errb)
	o, err := parseStepArgs([]string{"--log-format", "json"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := configureLogger(log, o); err != nil {
		t.Fatal(err)
	}
	klog.InfoS("attempting to acquire leader lease", "lease", "ns/x")
	klog.ErrorS(errors.New("forbidden"), "Failed to watch")
	lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 lines:\n%s", errb.String())
	}
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil || m["logger"] != "client-go" {
			t.Errorf("not a JSON line from client-go (%v): %s", err, l)
		}
	}
}
