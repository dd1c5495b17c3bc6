package plugin

import (
	"strings"
	"testing"
	"time"
)

func TestParseConfigValid(t *testing.T) {
	cfg, err := ParseConfig([]byte(`{"configMaps":["web-config-7f9c2","web-env-b41d0"],"secrets":["web-secret-1"],"timeout":"90s"}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Objects(); len(got) != 3 || got[0] != (Object{KindConfigMap, "web-config-7f9c2"}) || got[2] != (Object{KindSecret, "web-secret-1"}) {
		t.Errorf("objects = %v", got)
	}
	if cfg.Timeout.Duration != 90*time.Second {
		t.Errorf("timeout = %v", cfg.Timeout)
	}
	cfg, err = ParseConfig([]byte(`{"secrets":["s"]}`))
	if err != nil || cfg.Timeout.Duration != DefaultTimeout || cfg.AllowUnreferenced {
		t.Errorf("defaults: %+v, %v", cfg, err)
	}
}

// TestParseConfigBadInput: every bad input gets a message naming the problem and the fix.
func TestParseConfigBadInput(t *testing.T) {
	long := strings.Repeat("a", 254)
	many := `{"configMaps":[` + strings.Repeat(`"x",`, MaxObjects) + `"y"]}`
	cases := []struct {
		name, config string
		want         []string // substrings of the message
	}{
		{"empty", ``, []string{"config is empty", "configMaps"}},
		{"null", `null`, []string{"config is empty"}},
		{"malformed JSON", `{"configMaps": [`, []string{"not valid JSON"}},
		{"a list, not an object", `["web-config"]`, []string{"must be an object", "a list"}},
		{"a string, not an object", `"web-config"`, []string{"must be an object", "a string"}},
		{"lowercase key", `{"configmaps":["a"]}`, []string{`unknown key "configmaps"`, `did you mean "configMaps"`}},
		{"upper-case key", `{"ConfigMaps":["a"]}`, []string{`did you mean "configMaps"`}},
		{"singular key", `{"configMap":["a"]}`, []string{`did you mean "configMaps"`}},
		{"secret singular", `{"secret":["a"]}`, []string{`did you mean "secrets"`}},
		{"typo key", `{"configMaps":["a"],"alowUnreferenced":true}`, []string{`did you mean "allowUnreferenced"`}},
		{"unrelated key", `{"configMaps":["a"],"replicas":3}`, []string{`unknown key "replicas"`, "known keys are"}},
		{"string for list", `{"configMaps":"web-config"}`, []string{"configMaps: got a string, want a list of names"}},
		{"number in list", `{"configMaps":[3]}`, []string{"configMaps[0]: got a number, want a name"}},
		{"object for list", `{"secrets":{"name":"a"}}`, []string{"secrets: got an object"}},
		{"string for bool", `{"configMaps":["a"],"allowUnreferenced":"yes"}`, []string{"allowUnreferenced: got a string, want true or false"}},
		{"number for timeout", `{"configMaps":["a"],"timeout":300}`, []string{"timeout", `duration string such as "5m"`}},
		{"bad duration", `{"configMaps":["a"],"timeout":"5 minutes"}`, []string{`"5 minutes" is not a duration`}},
		{"negative timeout", `{"configMaps":["a"],"timeout":"-1m"}`, []string{`timeout: "-1m" is too short`}},
		{"huge timeout", `{"configMaps":["a"],"timeout":"5000h"}`, []string{"out of range"}},
		{"no objects", `{}`, []string{"no objects listed"}},
		{"empty lists", `{"configMaps":[],"secrets":[]}`, []string{"no objects listed"}},
		{"empty name", `{"configMaps":[""]}`, []string{"configMaps[0]: empty name"}},
		{"upper-case name", `{"configMaps":["Web-Config"]}`, []string{`configMaps[0]: "Web-Config" is not a valid object name`, "lower case"}},
		{"name with underscore", `{"secrets":["web_secret"]}`, []string{`secrets[0]: "web_secret" is not a valid object name`}},
		{"oversized name", `{"configMaps":["` + long + `"]}`, []string{"configMaps[0]", "must be no more than 253 characters"}},
		{"namespace-qualified", `{"configMaps":["other/web-config"]}`, []string{"namespace-qualified", `write only the name ("web-config")`}},
		{"duplicate", `{"configMaps":["a","b","a"]}`, []string{`configMaps[2]: "a" is listed twice`}},
		{"duplicate key", `{"configMaps":["a"],"configMaps":["b"]}`, []string{"configMaps"}},
		{"too many", many, []string{"more than the 1000 allowed"}},
		{"oversized config", `{"configMaps":["` + strings.Repeat("a", MaxConfigBytes) + `"]}`, []string{"more than the", "allowed"}},
		{"several problems at once", `{"configmaps":["a"],"secrets":"b"}`, []string{`did you mean "configMaps"`, "secrets: got a string"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.config))
			if err == nil {
				t.Fatalf("ParseConfig(%s) succeeded, want an error", truncate(tc.config, 60))
			}
			if !IsPermanent(err) {
				t.Errorf("error %v is not permanent", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message %q lacks %q", err.Error(), w)
				}
			}
		})
	}
}

func TestSuggestKey(t *testing.T) {
	for in, want := range map[string]string{"configmaps": "configMaps", "CONFIGMAPS": "configMaps", "secrts": "secrets", "timout": "timeout", "image": ""} {
		if got := suggestKey(in); got != want {
			t.Errorf("suggestKey(%q) = %q, want %q", in, got, want)
		}
	}
}
