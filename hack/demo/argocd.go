package main

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/configmap-attacher/configmap-attacher/test/support/cluster"
)

// The -argocd variant (`make demo-argocd`): the same story, but every revision is a commit to
// a file:// Git repository that the real Argo CD (application controller and repo server,
// test/support/cluster StartArgoCD) syncs into the namespace with automated sync and prune. Nothing
// is created or pruned by hand: Argo CD applies each revision and prunes what left Git, and
// the tree after each sync shows what it kept (owned objects are not prune candidates).

// argoApp is the Application's name.
const argoApp = "web"

// startArgoCD starts Argo CD and creates the Git repository.
func (d *demo) startArgoCD() error {
	t0 := time.Now()
	fmt.Printf("   starting Argo CD %s (application controller, repo server, miniredis) ... ", cluster.ArgoCDVersion)
	if _, err := cluster.ArgoCDDir(); err != nil { // builds it when missing (minutes), progress on stderr
		fmt.Println("failed")
		return err
	}
	a, err := cluster.StartArgoCD(d.c)
	if err != nil {
		fmt.Println("failed")
		return fmt.Errorf("start Argo CD: %w", err)
	}
	d.argo = a
	fmt.Printf("up in %v\n", since(t0))
	say("  pids %v (redis, repo server, application controller), all on 127.0.0.1; logs in %s", a.PIDs(), a.Dir)
	if d.repo, err = cluster.NewGitRepo(filepath.Join(d.c.Dir, "git")); err != nil {
		return err
	}
	say("  Git repository %s; Application %s/%s: path app/, automated sync with prune", d.repo.URL(), cluster.ArgoCDNamespace, argoApp)
	return nil
}

// manifests renders revision r as a user's repository holds it: the ConfigMap, the Secret and
// the Rollout (canary, the plugin step first).
func (r *revision) manifests() (map[string]string, error) {
	l := map[string]string{cluster.LabelRevisioned: "true", cluster.LabelApp: appName, labelRevision: strconv.Itoa(r.n)}
	ro := r.rollout()
	ro.Namespace = ""
	objs := []any{
		&corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Name: r.cm, Labels: l}, Data: r.cmData},
		&corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}, ObjectMeta: metav1.ObjectMeta{Name: r.secret, Labels: l}, StringData: r.secretData},
		&v1alpha1.Rollout{TypeMeta: metav1.TypeMeta{APIVersion: "argoproj.io/v1alpha1", Kind: "Rollout"}, ObjectMeta: ro.ObjectMeta, Spec: ro.Spec},
	}
	var docs []string
	for _, o := range objs {
		b, err := yaml.Marshal(o)
		if err != nil {
			return nil, err
		}
		// Drop the empty status and creationTimestamp the typed objects marshal.
		var m map[string]any
		if err := yaml.Unmarshal(b, &m); err != nil {
			return nil, err
		}
		delete(m, "status")
		if md, ok := m["metadata"].(map[string]any); ok {
			delete(md, "creationTimestamp")
		}
		if b, err = yaml.Marshal(m); err != nil {
			return nil, err
		}
		docs = append(docs, string(b))
	}
	return map[string]string{"web.yaml": strings.Join(docs, "---\n")}, nil
}

// syncRevision commits revision r, lets Argo CD sync it (creating the Application on the
// first) and prints what the sync pruned and what it kept.
func (d *demo) syncRevision(r *revision) error {
	files, err := r.manifests()
	if err != nil {
		return err
	}
	sha, err := d.repo.Commit("app", files, fmt.Sprintf("revision %d", r.n))
	if err != nil {
		return err
	}
	d.revs[r.n] = r
	ctx, cancel := context.WithTimeout(d.ctx, 2*time.Minute)
	defer cancel()
	t0 := time.Now()
	if r.n == 1 {
		if err := d.argo.CreateApplication(ctx, cluster.ApplicationSpec{Name: argoApp, RepoURL: d.repo.URL(), Path: "app", Namespace: namespace, AutoSync: true}); err != nil {
			return err
		}
	}
	say("committed revision %d (%s): ConfigMap %s, Secret %s, Rollout pod template + step config", r.n, sha[:8], r.cm, r.secret)
	st, err := d.argo.WaitSynced(ctx, argoApp, sha, r.n > 1)
	if err != nil {
		return err
	}
	var pruned, applied []string
	for _, res := range st.SyncResult() {
		if res.Status == "Pruned" {
			pruned = append(pruned, res.Kind+"/"+res.Name)
		} else {
			applied = append(applied, res.Kind+"/"+res.Name)
		}
	}
	sort.Strings(pruned)
	sort.Strings(applied)
	var kept []string
	for i := 1; i < r.n; i++ {
		for _, o := range d.revs[i].objects() {
			if m, err := d.meta(o); err == nil && m != nil {
				kept = append(kept, o.String())
			}
		}
	}
	say("Argo CD synced revision %d in %v (auto-sync, prune): applied %s", r.n, since(t0), listOrNone(applied))
	say("  pruned: %s", listOrNone(pruned))
	if r.n > 1 {
		say("  kept, no longer in Git but owned by a ReplicaSet (not prune candidates): %s", listOrNone(kept))
	}
	for _, p := range pruned {
		for i := 1; i < r.n; i++ {
			if rv := d.revs[i]; rv.rs != nil {
				for _, o := range rv.objects() {
					if o.String() == p {
						if g, _ := d.gone("ReplicaSet", rv.rs.Name)(); !g {
							return fmt.Errorf("the sync pruned %s, which ReplicaSet %s (revision %d) still uses: it should have been owned", p, rv.rs.Name, i)
						}
					}
				}
			}
		}
	}
	return nil
}

// scenarioArgoCD is scenario with every revision synced by Argo CD.
func (d *demo) scenarioArgoCD() error {
	r := newRevision(1)
	stage("revision 1 through Argo CD: ConfigMap %s, Secret %s and Rollout %s/%s (canary, %d replicas, revisionHistoryLimit %d)",
		r.cm, r.secret, namespace, appName, replicas, historyLimit)
	t0 := time.Now()
	if err := d.syncRevision(r); err != nil {
		return err
	}
	say("steps do not run on a first deploy: the controller mode attaches revision 1 before revision 2's sync could prune it")
	if err := d.waitHealthy(r); err != nil {
		return err
	}
	if err := d.checkOwned(r); err != nil {
		return err
	}
	say("revision 1's ConfigMap and Secret owned by ReplicaSet %s %v after the commit", r.rs.Name, since(t0))
	if err := d.printTree("after the sync of revision 1 (controller mode)"); err != nil {
		return err
	}
	for n := 2; n <= revisions; n++ {
		r := newRevision(n)
		stage("revision %d through Argo CD: new ConfigMap %s and Secret %s; revision %d's leave Git", n, r.cm, r.secret, n-1)
		if prev := d.revs[n-1]; prev != nil && prev.rs != nil {
			// As in scenario: start each revision in a new second (revisionHistoryLimit order).
			if wait := time.Until(prev.rs.CreationTimestamp.Add(time.Second + 50*time.Millisecond)); wait > 0 {
				time.Sleep(wait)
			}
		}
		t0 := time.Now()
		if err := d.syncRevision(r); err != nil {
			return err
		}
		msg, err := d.waitStep(r)
		if err != nil {
			return err
		}
		say("step 0 (plugin %s): Successful %v after the commit: %s", cluster.PluginName, since(t0), msg)
		if err := d.checkOwned(r); err != nil {
			return err
		}
		if err := d.waitPaused(r, 2); err != nil {
			return err
		}
		say("step 1 setWeight 50, step 2 pause {}: paused with 1 canary and 1 stable pod")
		if err := d.printTree(fmt.Sprintf("after the sync of revision %d (step: %s)", n, msg)); err != nil {
			return err
		}
		if err := d.finishRevision(n); err != nil {
			return err
		}
	}
	return nil
}

// stopArgoCD stops the Argo CD processes, returning what it stopped.
func (d *demo) stopArgoCD() []string {
	if d.argo == nil {
		return nil
	}
	var out []string
	for _, pid := range d.argo.PIDs() {
		out = append(out, fmt.Sprintf("argocd %d", pid))
	}
	d.argo.Stop()
	return out
}
