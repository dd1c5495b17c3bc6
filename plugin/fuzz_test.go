package plugin

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/configmap-attacher/configmap-attacher/test/support/fixtures"
)

// FuzzParseConfig: any input either parses into a config that satisfies every rule, or
// fails with a ConfigError; it never panics.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		`{"configMaps":["web-config-7f9c2"],"secrets":["web-secret-b41d0"],"timeout":"90s"}`,
		`{"configmaps":["a"]}`, `{"configMaps":"a"}`, `{"configMaps":["a","a"]}`, `null`, `[]`, `{}`,
		`{"configMaps":["ns/a"],"allowUnreferenced":true,"timeout":"5000h"}`, `{"timeout":300}`, `{"configMaps":[`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		cfg, err := ParseConfig(raw)
		if err != nil {
			if !IsPermanent(err) || !strings.HasPrefix(err.Error(), "invalid step config: ") {
				t.Fatalf("error %T %q is not a ConfigError", err, err)
			}
			return
		}
		objs := cfg.Objects()
		if len(objs) == 0 || len(objs) > MaxObjects {
			t.Fatalf("accepted %d objects", len(objs))
		}
		if problems := validateNames("configMaps", cfg.ConfigMaps); len(problems) > 0 {
			t.Fatalf("accepted invalid names: %v", problems)
		}
		if problems := validateNames("secrets", cfg.Secrets); len(problems) > 0 {
			t.Fatalf("accepted invalid names: %v", problems)
		}
		if cfg.Timeout.Duration <= 0 || cfg.Timeout.Duration > maxTimeout {
			t.Fatalf("accepted timeout %v", cfg.Timeout)
		}
	})
}

// FuzzTemplateReferences: the walker never panics, and every name it reports appears in the
// pod spec it was given.
func FuzzTemplateReferences(f *testing.F) {
	seed, _ := json.Marshal(fixtures.PodSpec([]string{"cm-a", "cm-b"}, []string{"sec-a"}))
	f.Add(seed)
	f.Add([]byte(`{"volumes":[{"name":"v","projected":{"sources":[{"configMap":{"name":"p"}},{"secret":{"name":"s"}}]}}],"imagePullSecrets":[{"name":"pull"}]}`))
	f.Add([]byte(`{"initContainers":[{"name":"i","envFrom":[{"configMapRef":{"name":"x"}}],"env":[{"name":"E","valueFrom":{"secretKeyRef":{"name":"y","key":"k"}}}]}]}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		var spec corev1.PodSpec
		if json.Unmarshal(raw, &spec) != nil {
			return
		}
		refs := TemplateReferences(&spec)
		for name := range refs.ConfigMaps {
			if name == "" || !strings.Contains(string(raw), name) {
				t.Fatalf("ConfigMap %q not in the input", name)
			}
		}
		for name := range refs.Secrets {
			if name == "" || !strings.Contains(string(raw), name) {
				t.Fatalf("Secret %q not in the input", name)
			}
		}
	})
}
