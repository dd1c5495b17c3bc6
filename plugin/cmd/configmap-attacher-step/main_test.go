package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestImportGraphIsTheStepAlone: the step plugin's binary links none of what only the other
// modes use. It lives in the Rollouts controller's pod for the controller's whole life, and
// these packages were measured as most of its resident memory: client-go's typed clientset
// (every group's client and apply configurations), k8s.io/kubernetes (its feature gates and
// Prometheus registrations), argo-rollouts' replicaset helpers (k8s.io/kubernetes/pkg/controller),
// and our controller, audit, Job and typed-clients packages.
func TestImportGraphIsTheStepAlone(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	banned := []string{
		"k8s.io/client-go/kubernetes",
		"k8s.io/client-go/applyconfigurations",
		"k8s.io/client-go/informers",
		"k8s.io/kubernetes/",
		"github.com/prometheus/client_golang",
		"github.com/argoproj/argo-rollouts/utils/replicaset",
		"github.com/argoproj/argo-rollouts/pkg/client",
		"github.com/configmap-attacher/configmap-attacher/plugin/controller",
		"github.com/configmap-attacher/configmap-attacher/plugin/audit",
		"github.com/configmap-attacher/configmap-attacher/plugin/job",
		"github.com/configmap-attacher/configmap-attacher/plugin/clientset",
		"github.com/configmap-attacher/configmap-attacher/plugin/newrs",
	}
	// The package of the other commands (stepplugin and this one sit below it).
	const commands = "github.com/configmap-attacher/configmap-attacher/plugin/cmd"
	var found []string
	for _, d := range deps {
		if d == commands {
			found = append(found, d)
		}
		for _, b := range banned {
			if d == b || strings.HasPrefix(d, strings.TrimSuffix(b, "/")+"/") {
				found = append(found, d)
			}
		}
	}
	if len(found) > 0 {
		t.Errorf("the step plugin's binary links %d packages only the other modes need:\n%s", len(found), strings.Join(found, "\n"))
	}
	if !slices.Contains(deps, "github.com/configmap-attacher/configmap-attacher/plugin/step") || !slices.Contains(deps, "github.com/hashicorp/go-plugin") {
		t.Errorf("go list -deps lacks the step or go-plugin: %d packages listed", len(deps))
	}
	t.Logf("%d packages", len(deps))
}
