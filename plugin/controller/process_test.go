package controller

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestTransientDiscovery(t *testing.T) {
	for err, want := range map[error]bool{
		errors.New("dial tcp 127.0.0.1:6443: connect: connection refused"):                       true,
		apierrors.NewServiceUnavailable("starting"):                                              true,
		apierrors.NewForbidden(schema.GroupResource{Resource: "rollouts"}, "", errors.New("no")): false,
	} {
		if transientDiscovery(err) != want {
			t.Errorf("transientDiscovery(%v) = %v, want %v", err, !want, want)
		}
	}
}

type readiness struct {
	ready  bool
	detail string
}

func (r readiness) Readiness() (bool, string) { return r.ready, r.detail }

func TestReadyzHandler(t *testing.T) {
	for _, tc := range []struct {
		r    readiness
		code int
	}{
		{readiness{false, "caches not synced\nnot synced: namespace a: secrets"}, http.StatusServiceUnavailable},
		{readiness{true, "ok: serving 1 of 2 namespaces\nnot synced: namespace a: secrets"}, http.StatusOK},
		{readiness{true, "ok"}, http.StatusOK},
	} {
		w := httptest.NewRecorder()
		readyz(tc.r)(w, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		if w.Code != tc.code || w.Body.String() != tc.r.detail+"\n" {
			t.Errorf("%+v: %d %q", tc.r, w.Code, w.Body.String())
		}
	}
}

// TestSoftMemoryLimit: 80 % of the container's limit, the user's GOMEMLIMIT winning, nothing
// for a missing or nonsensical limit (the downward API gives bytes).
func TestSoftMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want int64
		ok   bool
	}{
		{map[string]string{MemoryLimitEnv: "234881024"}, 187904819, true}, // 224Mi
		{map[string]string{MemoryLimitEnv: "234881024", "GOMEMLIMIT": "100MiB"}, 0, false},
		{map[string]string{}, 0, false},
		{map[string]string{MemoryLimitEnv: "224Mi"}, 0, false},
		{map[string]string{MemoryLimitEnv: "0"}, 0, false},
		{map[string]string{MemoryLimitEnv: "-5"}, 0, false},
	} {
		got, ok := SoftMemoryLimit(func(k string) string { return tc.env[k] })
		if got != tc.want || ok != tc.ok {
			t.Errorf("SoftMemoryLimit(%v) = %d, %v; want %d, %v", tc.env, got, ok, tc.want, tc.ok)
		}
	}
}
