package rpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
)

// TestPluginLogFormat: go-plugin's host keeps a line's level only if it starts with "[LEVEL]"
// or is hclog JSON; anything else lands in the controller's log as DEBUG.
func TestPluginLogFormat(t *testing.T) {
	var buf bytes.Buffer
	l := logrus.New()
	l.SetOutput(&buf)
	l.SetFormatter(LogFormatter("text"))
	l.WithField("rollout", "web").Warn("careful")
	if got := buf.String(); !strings.HasPrefix(got, "[WARN] ") || !strings.Contains(got, `msg=careful`) || !strings.Contains(got, "rollout=web") {
		t.Errorf("text line %q", got)
	}
	buf.Reset()
	l.SetFormatter(LogFormatter("json"))
	l.WithError(errors.New("boom")).WithField("object", "ConfigMap a").Error("failed")
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	if m["@level"] != "error" || m["@message"] != "failed" || m["error"] != "boom" || m["object"] != "ConfigMap a" {
		t.Errorf("json line %v", m)
	}
	if ts, _ := m["@timestamp"].(string); len(ts) < len("2006-01-02T15:04:05.000000") {
		t.Errorf("timestamp %q", ts)
	}
}
