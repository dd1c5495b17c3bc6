// Package core proves the ownership core against a real control plane: etcd,
// kube-apiserver and kube-controller-manager (with the garbage collector) on 127.0.0.1, started
// by test/support/cluster from binaries built from Go modules: owner references and garbage
// collection, the rules, discovery, every user counts, bad input writing nothing.
package core

import (
	"os"
	"testing"

	"github.com/configmap-attacher/configmap-attacher/test/support/realapi"
)

func TestMain(m *testing.M) { os.Exit(realapi.Main(m, "core")) }
