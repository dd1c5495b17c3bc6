// Package gitops proves the GitOps story of docs/gitops.md with the real Argo CD v3.2.6: its
// application controller and repo server (hack/build-binaries.sh argocd, test/support/cluster
// StartArgoCD) sync a file:// Git repository into the loopback control plane, beside the real
// Argo Rollouts controller (the step plugin registered), kube-controller-manager (garbage
// collector, job controller) and the fake kubelet, which also runs the built binary for the
// pods of examples/job.yaml's Job.
//
// Every test commits revisions as a user's repository holds them (new content-hashed ConfigMap
// and Secret names per revision, so each commit is a real change and auto-sync fires) and
// checks what Argo CD really did: what the sync pruned, what it kept, what is owned, what the
// garbage collector collected, whether a restarted stable pod starts, and what the app shows.
//
//   - TestProblemWithoutAttacher: nothing attaches; each sync prunes the previous revision's
//     config and a restarted stable pod gets CreateContainerConfigError.
//   - TestStepPlugin, TestStepPluginPruneLast: the step alone; revision 1 is pruned before
//     revision 2's step, unless Prune=false + IgnoreExtraneous (or PruneLast=true) is set.
//   - TestControllerMode, TestControllerModeBlueGreen: the controller mode, revision 1 and
//     promote --full included.
//   - TestSyncHookJob: examples/job.yaml as a Sync hook, created before the Rollout spec.
//   - TestPruneOptions, TestReplaceDropsOwnerReferences, TestArgoCDListensOnLoopback: Argo CD's
//     view of never-attached objects, Replace=true, and loopback-only listeners.
//
// The figures (lines starting with FIGURE in -v output) are in docs/gitops.md. Without the
// Argo CD build the tests skip, and fail with CI=true or CMA_REQUIRE_CLUSTER=1.
package gitops
