package cluster

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"

	"k8s.io/client-go/rest"
)

// RequestKey identifies a class of API requests: Verb is one of get, list, watch, create,
// update, patch, delete, deletecollection (or the lower-case HTTP method for non-resource
// paths); Resource is the plural resource, with "/<subresource>" when there is one
// ("configmaps", "replicasets", "rollouts", "rollouts/status", "serviceaccounts/token"), or
// the path for non-resource requests ("/api", "/apis/apps/v1", "/version").
type RequestKey struct{ Verb, Resource string }

func (k RequestKey) String() string { return k.Verb + " " + k.Resource }

// Counter counts the requests made through configs it wrapped, by verb and resource. It is
// safe for concurrent use. Requests are counted when sent, whatever the response.
type Counter struct {
	// ListPagesApart counts the second and later pages of a list (a request with a continue
	// token) as verb "list-page", apart from the lists themselves: a goal that wants requests
	// constant in a namespace's size apart from pages. Set it before the first request.
	ListPagesApart bool

	mu     sync.Mutex
	counts map[RequestKey]int
}

// NewCounter returns an empty Counter.
func NewCounter() *Counter { return &Counter{counts: map[RequestKey]int{}} }

// Wrap returns a copy of cfg whose requests are counted (after any WrapTransport cfg had).
func (c *Counter) Wrap(cfg *rest.Config) *rest.Config {
	cp := rest.CopyConfig(cfg)
	cp.Wrap(c.WrapTransport)
	return cp
}

// WrapTransport wraps rt so that its requests are counted; usable as rest.Config.WrapTransport.
func (c *Counter) WrapTransport(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		k := ClassifyRequest(req)
		if c.ListPagesApart && req.URL.Query().Get("continue") != "" {
			k.Verb = "list-page"
		}
		c.Add(k)
		return rt.RoundTrip(req)
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Add counts one request.
func (c *Counter) Add(k RequestKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil {
		c.counts = map[RequestKey]int{}
	}
	c.counts[k]++
}

// Count returns how many verb requests on resource were made ("patch", "configmaps").
func (c *Counter) Count(verb, resource string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[RequestKey{verb, resource}]
}

// Total returns the number of requests counted.
func (c *Counter) Total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.counts {
		n += v
	}
	return n
}

// Snapshot returns a copy of the counts.
func (c *Counter) Snapshot() map[RequestKey]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[RequestKey]int, len(c.counts))
	for k, v := range c.counts {
		m[k] = v
	}
	return m
}

// ByName returns a copy of the counts keyed by RequestKey.String ("patch configmaps").
func (c *Counter) ByName() map[string]int {
	snap := c.Snapshot()
	m := make(map[string]int, len(snap))
	for k, v := range snap {
		m[k.String()] = v
	}
	return m
}

// Reset sets all counts to zero.
func (c *Counter) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts = map[RequestKey]int{}
}

// String renders the counts sorted by verb then resource: "list replicasets=1 patch configmaps=3".
func (c *Counter) String() string {
	snap := c.Snapshot()
	keys := make([]RequestKey, 0, len(snap))
	for k := range snap {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].Verb != keys[j].Verb {
			return keys[i].Verb < keys[j].Verb
		}
		return keys[i].Resource < keys[j].Resource
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %s=%d", k.Verb, k.Resource, snap[k])
	}
	return strings.Join(parts, " ")
}

// ClassifyRequest derives the Kubernetes verb and resource of an API request from its method
// and path: GET on a named object is get, on a collection list, with ?watch=true (or a legacy
// /watch/ path) watch; POST create; PUT update; PATCH patch; DELETE on a named object delete,
// on a collection deletecollection.
func ClassifyRequest(req *http.Request) RequestKey {
	path := strings.Trim(req.URL.Path, "/")
	parts := strings.Split(path, "/")
	var rest []string
	switch {
	case len(parts) >= 2 && parts[0] == "api": // api/v1/...
		rest = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis": // apis/group/version/...
		rest = parts[3:]
	}
	if len(rest) == 0 {
		return RequestKey{strings.ToLower(req.Method), "/" + path}
	}
	watch := false
	if rest[0] == "watch" {
		watch, rest = true, rest[1:]
	}
	if w := req.URL.Query().Get("watch"); w == "true" || w == "1" {
		watch = true
	}
	// namespaces/<ns>/<resource>/... except the namespace's own subresources.
	if len(rest) >= 3 && rest[0] == "namespaces" && !(len(rest) == 3 && (rest[2] == "status" || rest[2] == "finalize")) {
		rest = rest[2:]
	}
	if len(rest) == 0 {
		return RequestKey{strings.ToLower(req.Method), "/" + path}
	}
	resource, named := rest[0], len(rest) > 1
	if len(rest) > 2 {
		resource += "/" + strings.Join(rest[2:], "/")
	}
	verb := strings.ToLower(req.Method)
	switch req.Method {
	case http.MethodGet, http.MethodHead:
		switch {
		case watch:
			verb = "watch"
		case named:
			verb = "get"
		default:
			verb = "list"
		}
	case http.MethodPost:
		verb = "create"
	case http.MethodPut:
		verb = "update"
	case http.MethodPatch:
		verb = "patch"
	case http.MethodDelete:
		verb = "delete"
		if !named {
			verb = "deletecollection"
		}
	}
	return RequestKey{verb, resource}
}
