// Package soak is the invariant soak: random, weighted rollout operations and injected faults
// against the real control plane (test/support/cluster), the real Argo Rollouts controller with
// the step plugin and `configmap-attacher controller` (2 replicas with leader election), with
// the ownership invariants checked every second and again once quiet. Besides the
// SOAK_ROLLOUTS workloads (one namespace each) there is a shared-config namespace: a step
// Rollout and a Deployment sharing an opted-in ConfigMap, and a StatefulSet sharing an opted-in
// Secret with the Rollout; and an every-kind namespace: two Deployments sharing an opted-in
// ConfigMap, a StatefulSet, a DaemonSet and a CronJob with its Jobs (kinds_test.go).
// Operations include delete-and-recreate and delete-and-re-apply of a workload; invariants 8
// (no early deletion) and 9 (no leak) are users_test.go.
//
//	make soak                              # 10 minutes, writes docs/soak.md
//	SOAK_SEED=7 SOAK_DURATION=3m make soak # replay a seed
//	go test ./test/soak                    # the 60-second run of `make test` (bin/soak/report.md)
//
// Environment: SOAK_DURATION (default 60s), SOAK_SEED (default 1), SOAK_ROLLOUTS (workloads,
// default 5), SOAK_REPORT (default bin/soak/report.md), SOAK_BINARY (test a prebuilt binary,
// e.g. a deliberately broken one, instead of building this tree), SOAK_NO_APISERVER_FAULTS=1 (a
// control run without apiserver restarts and throttling).
package soak
