package main

import "testing"

func TestRender(t *testing.T) {
	s := snapshot{
		Rollout: "default/web",
		Summary: "stable web-5b8a1c, canary web-6d9f8c7, paused at step 2",
		RSs: []rsView{
			{Name: "web-6d9f8c7", Revision: "3", Role: "canary", Ready: 1, Replicas: 1, Objects: []objView{
				{"ConfigMap", "web-config-a1b2c", stateOwned}, {"Secret", "web-secret-d4e5f", stateOwned}}},
			{Name: "web-5b8a1c", Revision: "2", Role: "stable", Ready: 1, Replicas: 1, Objects: []objView{
				{"ConfigMap", "web-config-0f0f0", stateMissing}, {"Secret", "web-secret-1e1e1", stateNotOwned}}},
		},
		Collected: []string{"rev 1: ReplicaSet web-1111, ConfigMap web-config-11111, Secret web-secret-11111"},
	}
	want := `Rollout default/web  (stable web-5b8a1c, canary web-6d9f8c7, paused at step 2)
├─ ReplicaSet web-6d9f8c7  rev 3  canary  1/1 ready
│  ├─ ConfigMap web-config-a1b2c  ← owned
│  └─ Secret    web-secret-d4e5f  ← owned
├─ ReplicaSet web-5b8a1c   rev 2  stable  1/1 ready
│  ├─ ConfigMap web-config-0f0f0  ✗ MISSING (its pods fail with CreateContainerConfigError)
│  └─ Secret    web-secret-1e1e1  ✗ NOT OWNED by this ReplicaSet
├─ (not owned by any ReplicaSet)  none
└─ collected  rev 1: ReplicaSet web-1111, ConfigMap web-config-11111, Secret web-secret-11111
`
	if got := render(s); got != want {
		t.Errorf("render:\n%s\nwant:\n%s", got, want)
	}

	s.RSs = s.RSs[:1]
	s.Collected = nil
	s.Unowned = []objView{{"ConfigMap", "web-config-99999", "revision 1"}}
	want = `Rollout default/web  (stable web-5b8a1c, canary web-6d9f8c7, paused at step 2)
├─ ReplicaSet web-6d9f8c7  rev 3  canary  1/1 ready
│  ├─ ConfigMap web-config-a1b2c  ← owned
│  └─ Secret    web-secret-d4e5f  ← owned
└─ (not owned by any ReplicaSet: never collected)
   └─ ConfigMap web-config-99999  revision 1
`
	if got := render(s); got != want {
		t.Errorf("render:\n%s\nwant:\n%s", got, want)
	}
}

func TestContentHashNames(t *testing.T) {
	seen := map[string]bool{}
	for n := 1; n <= revisions; n++ {
		r := newRevision(n)
		for _, name := range []string{r.cm, r.secret} {
			if seen[name] {
				t.Fatalf("name %s twice", name)
			}
			seen[name] = true
		}
		if again := newRevision(n); again.cm != r.cm || again.secret != r.secret {
			t.Errorf("revision %d: names not deterministic", n)
		}
	}
}
