// Package plugin is the core of the configmap-attacher plugin, which every mode shares: the
// ownership rules and their one write entry point. Every mode is a sibling package over it
// (plugin/step, plugin/job, plugin/controller, plugin/audit; plugin/cmd parses their flags):
// the modes find candidates, wait and report; the core decides which ReplicaSets become owners
// of which ConfigMaps and Secrets, under one policy, and writes that as add-only merge patches
// through one entry point, Attacher.Reconcile.
//
// Each file holds one kind of thing, so its name says where to look:
//   - core.go: Reconcile, the one write entry point, and what it takes and returns (Request,
//     Plan, Write, Result).
//   - rules.go: which objects a run considers and what each gets: the rule table of an
//     explicit list, discovery, and planWrites, the rules every candidate goes through.
//   - users.go: who uses an object in its namespace (every user counts: NamespaceUsage,
//     UserView); refs.go: which objects a pod template uses (kubelet.go: the kubelet's
//     walkers, copied so the step does not link k8s.io/kubernetes).
//   - policy.go: the opt-in label and selector, positivity, the credentials rule.
//   - maintainers.go: who keeps the owners of config shared beyond one workload current: the
//     marks the controller writes on its leader Lease, and MaintainedBy, the pure decision a
//     run scoped to its workload (the step, the Job, audit) takes from the Leases it read.
//   - ownership.go: the pure ownership rules: the patch body, missing owners, which
//     ReplicaSets may own, the gaps audit reports.
//   - workload.go: a workload and its ReplicaSets: selector, controller, spec.workloadRef,
//     the target by pod-template hash, history order (argo-rollouts' FindNewReplicaSet is
//     package newrs's: it links k8s.io/kubernetes).
//   - kube.go: Kube, the core's typed requests, over three REST clients (the step links no
//     typed clientset; package clientset serves Kube from one).
//   - api.go: the only file that sends requests: the Attacher, every list, get and patch, and
//     call, the deadline-and-retry wrapper each of them goes through.
//   - write.go: the write of a plan: one patch per object, its checks and its outcome.
//   - messages.go: every message the core reports (attached, skipped, refused, and the fix);
//     errors.go: permanent against transient errors.
//   - config.go: the step config (and the Job's flags) as one Config; client.go: building
//     the clients; events.go: Events on the Rollout.
//
// The package never parses flags, prints usage or renders reports, imports no go-plugin or
// Argo Rollouts RPC type, and never reads, logs or changes object data, labels or
// annotations.
package plugin
