package plugin

import (
	"context"
	"errors"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// FailError is a permanent problem: retrying the same input cannot succeed, so the step
// ends Failed (the controller then aborts the rollout) and the command line exits 1.
// Its message names what is wrong and the fix.
type FailError struct{ Msg string }

func (e *FailError) Error() string { return e.Msg }

// IsPermanent reports whether err should fail the step rather than be retried.
func IsPermanent(err error) bool {
	var f *FailError
	var c *ConfigError
	return errors.As(err, &f) || errors.As(err, &c)
}

// isTransient reports whether an API error may go away by itself: timeouts, throttling,
// server errors, optimistic-concurrency conflicts and transport errors (connection refused
// while the apiserver restarts). 4xx answers other than those are the caller's problem.
func isTransient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		// Not an answer from the apiserver: a transport error or a per-request deadline.
		return true
	}
	switch code := int(status.Status().Code); {
	case apierrors.IsTimeout(err), apierrors.IsServerTimeout(err), apierrors.IsTooManyRequests(err),
		apierrors.IsConflict(err), apierrors.IsUnauthorized(err):
		// 401 is retried: a projected service-account token may be mid-rotation.
		return true
	case code >= http.StatusInternalServerError:
		return true
	default:
		return false
	}
}
