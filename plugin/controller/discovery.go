package controller

import (
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/discovery"
)

// Discovery at start: which Argo Rollouts kinds the apiserver serves, so that the Rollout and
// Experiment caches are built only when their CRD is installed.

// Served says which Argo Rollouts kinds the apiserver serves (argoproj.io/v1alpha1): the
// Rollout CRD and the Experiment CRD are installed separately.
type Served struct{ Rollouts, Experiments bool }

// ArgoServed reports which of the Rollout and Experiment CRDs are installed.
func ArgoServed(dc discovery.DiscoveryInterface) (Served, error) {
	rl, err := dc.ServerResourcesForGroupVersion("argoproj.io/v1alpha1")
	if apierrors.IsNotFound(err) {
		return Served{}, nil
	}
	if err != nil {
		return Served{}, fmt.Errorf("discovering argoproj.io/v1alpha1: %w", err)
	}
	var s Served
	for _, r := range rl.APIResources {
		switch r.Name {
		case "rollouts":
			s.Rollouts = true
		case "experiments":
			s.Experiments = true
		}
	}
	return s, nil
}
