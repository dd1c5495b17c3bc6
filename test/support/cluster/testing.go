package cluster

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"
)

// WaitUntil polls cond every interval until it reports done; when ctx ends first it fails the
// test with what and cond's last description of the state.
func WaitUntil(t testing.TB, ctx context.Context, interval time.Duration, what string, cond func() (done bool, state string)) {
	t.Helper()
	var last string
	for {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v; last state: %s", what, ctx.Err(), last)
		case <-time.After(interval):
		}
	}
}

// LogLinesOnFailure registers a t.Cleanup that, when the test has failed, logs the last max
// lines of log() (a controller's log at path) that mention about (the test's namespace): a
// shared controller's log is long, and a failure wants the lines about its own objects.
func LogLinesOnFailure(t testing.TB, what, path string, log func() string, about string, max int) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		var lines []string
		for _, l := range strings.Split(log(), "\n") {
			if strings.Contains(l, about) {
				lines = append(lines, l)
			}
		}
		if len(lines) > max {
			lines = lines[len(lines)-max:]
		}
		t.Logf("%s log lines about %s (%s):\n%s", what, about, path, strings.Join(lines, "\n"))
	})
}

// SyncBuffer is a bytes.Buffer safe to read while a child process (exec.Cmd's Stdout or
// Stderr) or a logger writes to it.
type SyncBuffer struct {
	// Max, when above 0, bounds what is kept: past Max bytes only the last Max/2 are kept (a
	// long-running process's log read only for its tail).
	Max int

	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p (io.Writer).
func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.buf.Write(p)
	if b.Max > 0 && b.buf.Len() > b.Max {
		b.buf.Next(b.buf.Len() - b.Max/2)
	}
	return n, err
}

// Tail returns the last n lines written, joined with " | " (one line for a note or an error).
func (b *SyncBuffer) Tail(n int) string {
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// String returns what has been written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
