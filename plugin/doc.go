// Package plugin holds the logic of configmap-attacher.
package plugin

import (
	_ "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	_ "github.com/argoproj/argo-rollouts/pkg/client/clientset/versioned"
	_ "github.com/argoproj/argo-rollouts/utils/plugin/types"
	_ "github.com/sirupsen/logrus"
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/client-go/tools/clientcmd"
	_ "k8s.io/client-go/util/retry"
	_ "k8s.io/kubernetes/pkg/api/v1/pod"
	_ "sigs.k8s.io/json"
)
