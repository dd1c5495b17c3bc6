// Package bench holds the benchmarks of the step plugin against a real control plane (etcd,
// kube-apiserver and kube-controller-manager from test/support/cluster, on 127.0.0.1): step latency
// through the go-plugin RPC boundary of the built binary beside a client-go floor (the patches
// alone, and the patches after the same reads of the namespace's users the step makes), the
// step in a busy namespace (quiet, 1,000 and 5,000 Pods, with and without a live controller,
// beside the floor plus the reads of the step's formula; the apiserver's bytes and 429s per
// step; the plugin's peak RSS with 10 concurrent steps), API requests per step, the plugin
// process's memory, 10 concurrent callers over 500 Rollouts, and the command-line mode's wall
// time. The controller mode's benchmarks (controller_test.go, scale_test.go) live here too but
// are run on their own (docs/controller.md, make bench-scale).
//
// They only run with -bench (without it TestMain starts nothing):
//
//	make bench
//	make bench BENCH_RUN=StepBusy BENCH_COUNT=1   # only the busy-namespace leaves, no report
//
// which writes docs/benchmarks.md and docs/benchmarks-step-latency.svg from the run's own
// figures. See docs/benchmarks.md for the exact commands and what each figure means.
package bench
