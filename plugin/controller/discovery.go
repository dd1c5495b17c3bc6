package controller

import (
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/discovery"
)

// RolloutsServed reports whether the Rollout CRD is installed (argoproj.io/v1alpha1 rollouts).
func RolloutsServed(dc discovery.DiscoveryInterface) (bool, error) {
	rl, err := dc.ServerResourcesForGroupVersion("argoproj.io/v1alpha1")
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("discovering argoproj.io/v1alpha1: %w", err)
	}
	for _, r := range rl.APIResources {
		if r.Name == "rollouts" {
			return true, nil
		}
	}
	return false, nil
}
