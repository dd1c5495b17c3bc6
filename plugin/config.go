package plugin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsjson "sigs.k8s.io/json"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

const (
	// DefaultTimeout is how long a step (or the command line) waits for the ReplicaSet.
	DefaultTimeout = 5 * time.Minute
	// MaxConfigBytes bounds the step config. A Rollout object is limited by etcd to ~1.5 MiB;
	// a config near that size is a mistake, and refusing it early keeps the plugin cheap.
	MaxConfigBytes = 256 << 10
	// MaxObjects bounds the names one step may list.
	MaxObjects = 1000
	// maxTimeout keeps a typo such as "5000h" from parking a rollout forever.
	maxTimeout = 24 * time.Hour
)

// Config is the object under steps[].plugin.config.
type Config struct {
	// ConfigMaps names ConfigMaps in the Rollout's namespace.
	ConfigMaps []string `json:"configMaps,omitempty"`
	// Secrets names Secrets in the Rollout's namespace.
	Secrets []string `json:"secrets,omitempty"`
	// AllowUnreferenced attaches listed objects that no ReplicaSet of the Rollout references.
	AllowUnreferenced bool `json:"allowUnreferenced,omitempty"`
	// Timeout is how long to wait for the ReplicaSet, as a Go duration string ("5m").
	Timeout Duration `json:"timeout,omitempty"`
	// Discover, when set, also attaches every opted-in object that any ReplicaSet of the
	// Rollout still in history references (see Discover).
	Discover *Discover `json:"discover,omitempty"`
	// DryRun reports the owner references that would be added and writes nothing.
	DryRun bool `json:"dryRun,omitempty"`
}

// Discover selects the objects discovery may adopt. Only objects that match the selector are
// ever adopted, so static or shared config (which must not be garbage-collected with a
// ReplicaSet) is safe unless someone labels it.
type Discover struct {
	// Selector defaults to configmap-attacher/revisioned=true.
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
}

// LabelSelector returns the parsed selector (the default one when unset).
func (d *Discover) LabelSelector() (labels.Selector, error) {
	if d == nil || d.Selector == nil {
		return labels.SelectorFromSet(labels.Set{OptInLabel: "true"}), nil
	}
	return metav1.LabelSelectorAsSelector(d.Selector)
}

// knownKeys are the config keys, in the spelling the decoder requires.
var knownKeys = []string{"configMaps", "secrets", "allowUnreferenced", "timeout", "discover", "dryRun"}

// Duration is a time.Duration written as a Go duration string ("90s", "5m").
type Duration struct{ time.Duration }

// UnmarshalJSON accepts only a duration string: a bare number is ambiguous (seconds? nanoseconds?).
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration string such as \"5m\" or \"90s\", got %s", truncate(string(b), 40))
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration: use a string such as \"5m\" or \"90s\"", truncate(s, 40))
	}
	d.Duration = v
	return nil
}

// MarshalJSON writes the duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.Duration.String()) }

// ConfigError is a problem with the user's input. The step fails with it, and nothing is
// written; the message names the field, the value and the fix.
type ConfigError struct{ Problems []string }

func (e *ConfigError) Error() string {
	if len(e.Problems) == 1 {
		return "invalid step config: " + e.Problems[0]
	}
	return "invalid step config: " + strings.Join(e.Problems, "; ")
}

// ParseConfig decodes and validates the step config. Keys are case-sensitive: Go's
// encoding/json would quietly accept "configmaps" for "configMaps", and a near-miss key must
// be an error, not a silently empty list.
func ParseConfig(raw []byte) (Config, error) {
	var cfg Config
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) > MaxConfigBytes {
		return cfg, &ConfigError{[]string{fmt.Sprintf("config is %d bytes, more than the %d allowed: list fewer objects per step", len(trimmed), MaxConfigBytes)}}
	}
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		return cfg, &ConfigError{[]string{`config is empty: set "configMaps" and/or "secrets", e.g. config: {configMaps: [web-config-7f9c2]}`}}
	}
	if err := json.Unmarshal(trimmed, new(any)); err != nil {
		return cfg, &ConfigError{[]string{fmt.Sprintf("config is not valid JSON: %v", err)}}
	}
	var keys map[string]json.RawMessage
	strictErrs, err := sigsjson.UnmarshalStrict(trimmed, &keys)
	if err != nil {
		return cfg, &ConfigError{[]string{"config must be an object such as {configMaps: [web-config-7f9c2]}, not " + jsonKind(trimmed)}}
	}
	var problems []string
	for _, e := range strictErrs {
		// Only duplicate keys are reported here: YAML rejects them, but a JSON config may not.
		problems = append(problems, e.Error()+": write each key once")
	}
	var unknown []string
	for k := range keys {
		if !slices.Contains(knownKeys, k) {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	for _, k := range unknown {
		if s := suggestKey(k); s != "" {
			problems = append(problems, fmt.Sprintf("unknown key %q: did you mean %q? (keys are case-sensitive)", k, s))
		} else {
			problems = append(problems, fmt.Sprintf("unknown key %q: known keys are %s", k, strings.Join(knownKeys, ", ")))
		}
	}
	// Type errors per field, so each message carries its path.
	for _, k := range knownKeys {
		v, ok := keys[k]
		if !ok {
			continue
		}
		if err := decodeField(k, v, &cfg); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if len(problems) == 0 {
		problems = cfg.validate()
	}
	if len(problems) > 0 {
		return Config{}, &ConfigError{problems}
	}
	if cfg.Timeout.Duration == 0 {
		cfg.Timeout.Duration = DefaultTimeout
	}
	return cfg, nil
}

func decodeField(key string, v json.RawMessage, cfg *Config) error {
	var target any
	want := ""
	switch key {
	case "configMaps":
		return decodeNames(key, v, &cfg.ConfigMaps)
	case "secrets":
		return decodeNames(key, v, &cfg.Secrets)
	case "allowUnreferenced":
		target, want = &cfg.AllowUnreferenced, "true or false"
	case "timeout":
		target, want = &cfg.Timeout, `a duration string such as "5m"`
	case "discover":
		target, want = &cfg.Discover, `an object such as {} or {selector: {matchLabels: {configmap-attacher/revisioned: "true"}}}`
	case "dryRun":
		target, want = &cfg.DryRun, "true or false"
	}
	strictErrs, err := sigsjson.UnmarshalStrict(v, target)
	if err == nil && len(strictErrs) > 0 {
		err = strictErrs[0]
	}
	if err == nil {
		if key == "timeout" && cfg.Timeout.Duration < time.Second {
			return fmt.Errorf("timeout: %s is too short: the step waits in steps of seconds; use at least \"1s\", e.g. \"5m\", or leave it out for the default %s", string(bytes.TrimSpace(v)), DefaultTimeout)
		}
		return nil
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field != "" && te.Field != key {
			// A nested field: name its path and the value found there.
			return fmt.Errorf("%s.%s: got %s, want %s", key, te.Field, article(te.Value), nestedWant(te.Field, want))
		}
		return fmt.Errorf("%s: got %s, want %s", key, jsonKind(bytes.TrimSpace(v)), want)
	}
	return fmt.Errorf("%s: %v", key, err)
}

// decodeNames decodes a list of names element by element, so a wrong element is named by its
// index ("secrets[1]: got a number, want a name").
func decodeNames(key string, v json.RawMessage, out *[]string) error {
	var items []json.RawMessage
	if err := json.Unmarshal(v, &items); err != nil {
		return fmt.Errorf("%s: got %s, want a list of names", key, jsonKind(bytes.TrimSpace(v)))
	}
	var problems []string
	names := make([]string, 0, len(items))
	for i, it := range items {
		var n string
		if err := json.Unmarshal(it, &n); err != nil {
			problems = append(problems, fmt.Sprintf("%s[%d]: got %s, want a name", key, i, jsonKind(bytes.TrimSpace(it))))
			continue
		}
		names = append(names, n)
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	*out = names
	return nil
}

// article turns encoding/json's type word ("number", "object") into "a number", "an object".
func article(t string) string {
	switch t {
	case "object", "array":
		return "an " + map[string]string{"object": "object", "array": "list"}[t]
	case "bool":
		return "a boolean"
	case "":
		return "a value of the wrong type"
	}
	return "a " + t
}

func nestedWant(field, outer string) string {
	switch {
	case strings.HasSuffix(field, "matchLabels"):
		return `an object of label keys to string values, e.g. {configmap-attacher/revisioned: "true"}`
	case strings.Contains(field, "matchLabels"):
		return `a string label value, e.g. "true"`
	case strings.HasSuffix(field, "matchExpressions"):
		return "a list of {key, operator, values}"
	}
	return "the shape of " + outer
}

// validate checks names; it returns every problem, not just the first.
func (c *Config) validate() []string {
	var problems []string
	if len(c.ConfigMaps)+len(c.Secrets) == 0 && c.Discover == nil {
		problems = append(problems, `no objects listed: set "configMaps" and/or "secrets" to at least one name, or "discover: {}"`)
	}
	if c.Discover != nil && c.Discover.Selector != nil {
		sel, err := metav1.LabelSelectorAsSelector(c.Discover.Selector)
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("discover.selector: %v", err))
		case sel.Empty():
			problems = append(problems, `discover.selector is empty: it would adopt every ConfigMap and Secret the templates use, including static and shared ones; write discover: {} for the default label `+OptInLabel+`=true, or give matchLabels`)
		case !Positive(sel):
			problems = append(problems, fmt.Sprintf("discover.selector %q has no label objects must carry: it would adopt every ConfigMap and Secret the templates use that lacks a label, static and shared ones included; give matchLabels, or an Exists or In expression", sel))
		}
	}
	if n := len(c.ConfigMaps) + len(c.Secrets); n > MaxObjects {
		problems = append(problems, fmt.Sprintf("%d objects listed, more than the %d allowed in one step: split them over several steps", n, MaxObjects))
	}
	problems = append(problems, validateNames("configMaps", c.ConfigMaps)...)
	problems = append(problems, validateNames("secrets", c.Secrets)...)
	if c.Timeout.Duration < 0 || c.Timeout.Duration > maxTimeout {
		problems = append(problems, fmt.Sprintf("timeout: %s is out of range: use a positive duration up to %s", c.Timeout.Duration, maxTimeout))
	}
	return problems
}

// validateNames checks that each name is an object name in the Rollout's namespace.
func validateNames(field string, names []string) []string {
	var problems []string
	seen := map[string]bool{}
	for i, n := range names {
		path := fmt.Sprintf("%s[%d]", field, i)
		switch {
		case n == "":
			problems = append(problems, path+": empty name: remove it or write the object's name")
			continue
		case strings.Contains(n, "/"):
			problems = append(problems, fmt.Sprintf("%s: %q looks namespace-qualified: objects must be in the Rollout's namespace, write only the name (%q)", path, truncate(n, 80), truncate(n[strings.LastIndex(n, "/")+1:], 80)))
			continue
		}
		if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
			problems = append(problems, fmt.Sprintf("%s: %q is not a valid object name: %s", path, truncate(n, 80), strings.Join(errs, "; ")))
			continue
		}
		if seen[n] {
			problems = append(problems, fmt.Sprintf("%s: %q is listed twice: remove the duplicate", path, n))
		}
		seen[n] = true
	}
	return problems
}

// ValidateNames checks object names given for field (a flag such as -configmaps): each must be
// an object name in the Rollout's namespace, listed once. It returns every problem.
func ValidateNames(field string, names []string) []string { return validateNames(field, names) }

// suggestKey returns the known key a mistyped key probably meant.
func suggestKey(k string) string {
	best, bestDist := "", 3
	for _, known := range knownKeys {
		if strings.EqualFold(k, known) {
			return known
		}
		if d := editDistance(strings.ToLower(k), strings.ToLower(known)); d < bestDist {
			best, bestDist = known, d
		}
	}
	// Singular or other spellings people reach for.
	switch strings.ToLower(k) {
	case "configmap", "config-maps", "config_maps", "cms":
		return "configMaps"
	case "secret":
		return "secrets"
	}
	return best
}

// editDistance is the Levenshtein distance; keys are short, so the quadratic cost is nothing.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func jsonKind(v []byte) string {
	if len(v) == 0 {
		return "nothing"
	}
	switch v[0] {
	case '"':
		return "a string"
	case '[':
		return "a list"
	case '{':
		return "an object"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number"
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Objects lists the config's objects, ConfigMaps first, in config order.
func (c Config) Objects() []Object {
	objs := make([]Object, 0, len(c.ConfigMaps)+len(c.Secrets))
	for _, n := range c.ConfigMaps {
		objs = append(objs, Object{KindConfigMap, n})
	}
	for _, n := range c.Secrets {
		objs = append(objs, Object{KindSecret, n})
	}
	return objs
}
