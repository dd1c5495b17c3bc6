package plugin

import (
	"context"
	"errors"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
)

// TestCallStopsWhenCtxIsDone: a backoff sleep does not outlive the caller's ctx. With a 10 s
// backoff and a 100 ms ctx, call returns the last transient error as soon as ctx is done
// instead of sleeping out the backoff; the tries it did make are all it makes.
func TestCallStopsWhenCtxIsDone(t *testing.T) {
	a := &Attacher{Backoff: wait.Backoff{Duration: 10 * time.Second, Factor: 1, Steps: 4}}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	tries := 0
	busy := apierrors.NewTooManyRequests("busy", 1)
	t0 := time.Now()
	err := a.call(ctx, func(context.Context) error { tries++; return busy })
	if took := time.Since(t0); took > 2*time.Second {
		t.Errorf("call returned after %v: it slept out the backoff past its ctx", took)
	}
	if !errors.Is(err, busy) || tries != 1 {
		t.Errorf("call = %v after %d tries, want the transient error after 1 try", err, tries)
	}
}

// TestCallTriesAsRetryOnError: Steps tries in all for a transient error, one for a permanent
// one, and none after success.
func TestCallTriesAsRetryOnError(t *testing.T) {
	a := &Attacher{Backoff: wait.Backoff{Duration: time.Millisecond, Factor: 2, Steps: 4}}
	for _, c := range []struct {
		err   error
		tries int
	}{
		{apierrors.NewTooManyRequests("busy", 1), 4},
		{apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "x", nil), 1},
		{nil, 1},
	} {
		tries := 0
		err := a.call(context.Background(), func(context.Context) error { tries++; return c.err })
		if !errors.Is(err, c.err) || tries != c.tries {
			t.Errorf("call with %v: %v after %d tries, want %d tries", c.err, err, tries, c.tries)
		}
	}
}
