// Package rpc is the go-plugin boundary.
package rpc

import (
	_ "github.com/argoproj/argo-rollouts/rollout/steps/plugin/rpc"
	_ "github.com/hashicorp/go-plugin"
)
