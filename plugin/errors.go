package plugin

import (
	"context"
	"errors"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Errors: permanent (FailError, ConfigError) against transient, and the apiserver's answers.

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

func apiMessage(err error) string {
	var s apierrors.APIStatus
	if errors.As(err, &s) {
		return s.Status().Message
	}
	return err.Error()
}

// APIMessage is the apiserver's message in err (for an error that is not an API status, its
// text), for messages that quote the apiserver.
func APIMessage(err error) string { return apiMessage(err) }

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }

func isForbidden(err error) bool { return apierrors.IsForbidden(err) }

// IsReplaced reports the answer to a patch whose UID precondition failed: the name now belongs
// to another object than the one read (deleted and recreated in between).
func IsReplaced(err error) bool {
	return apierrors.IsInvalid(err) && strings.Contains(apiMessage(err), "metadata.uid")
}

func notFound(o Object) error {
	return apierrors.NewNotFound(o.Kind.Resource().GroupVersion().WithResource(o.Kind.Resource().Resource).GroupResource(), o.Name)
}
