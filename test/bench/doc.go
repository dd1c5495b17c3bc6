// Package bench holds the benchmarks of the step plugin against a real control plane (etcd,
// kube-apiserver and kube-controller-manager from test/support/cluster, on 127.0.0.1): step latency
// through the go-plugin RPC boundary of the built binary beside a client-go floor (the patches
// alone, and the patches after the same reads of the namespace's users the step makes), the
// same in a namespace that also holds 200 unrelated ReplicaSets (with requests and allocations
// per step), API requests per step, the plugin process's memory, 10 concurrent callers over
// 500 Rollouts, and the command-line mode's wall time.
//
// They only run with -bench (without it TestMain starts nothing):
//
//	make bench
//
// which writes docs/benchmarks.md and docs/benchmarks-step-latency.svg from the run's own
// figures. See docs/benchmarks.md for the exact commands and what each figure means.
package bench
