// Package plugin is the core of the configmap-attacher plugin, which every mode shares: the
// ownership rules and their one write entry point. Every mode is a sibling package over it
// (plugin/step, plugin/job, plugin/controller, plugin/audit; plugin/cmd parses their flags):
// the modes find candidates, wait and report; the core decides which users' owners (ReplicaSets,
// revisions, Jobs, Pods, anchors) become owners of which ConfigMaps and Secrets, under one
// policy, and writes that as add-only merge patches through one entry point,
// Attacher.Reconcile.
//
// One function decides an object's owners: decideOwners (owners.go), from everything the run
// read and confirmed of it (ownerFacts). The plan calls it for every candidate; the write calls
// it again once a stale view's owners are confirmed live. The senders send exactly what they
// are given: patch (send.go), the one write, through call, the one deadline-and-retry wrapper
// every request goes through (pages for the paged lists, Call for the modes).
//
// The layers, in reading order, each file named for its layer:
//   - reconcile.go: Reconcile, on top: it runs the layers below in order.
//   - read.go: the run's reads (read: the labels the label rules need, discovery, the Leases,
//     the namespace's users), metadata only; readusage.go: ReadUsage, the namespace's users
//     in pages, by the formula (formula.go names its requests).
//   - plan.go: the pure plan, no request and no ctx: the rule table of an explicit list
//     (ruleTable) and the rules every candidate goes through (planWrites); owners.go:
//     decideOwners and the users rule it applies (ownersOf: every user counts); policy.go:
//     the opt-in policy and the credentials rule (applyLabelRules).
//   - confirm.go: the live confirmation of a stale view's new owners (confirmOwners): facts
//     only, no decision.
//   - write.go: per object, concurrently: the confirmation, the final owners, the patch, the
//     wait for a listed object not created yet; the dry run; the outcome and its verdict.
//   - send.go: the senders: call, pages, patch (and the body it sends, ownerPatchFor),
//     createEvent.
//
// Beside them: types.go, the types every layer shares (Request, Plan, Write, Result, Skip,
// Blocked, Handover, Owner, Users); attacher.go, the Attacher and its defaults; users.go, the
// views of who uses what (NamespaceUsage, and the controller's UserView); refs.go and kubelet.go,
// which objects a pod template uses; workload.go, a workload and its ReplicaSets;
// maintainers.go, the controller's Lease marks and MaintainedBy; anchor.go, the anchors;
// gaps.go, audit's and the controller's gap counts; kube.go, Kube, the core's typed requests
// over three REST clients (the step links no typed clientset); messages.go and errors.go,
// every message and permanent against transient errors; config.go, client.go, events.go: the
// step config, the clients, Events on the Rollout.
//
// The package never parses flags, prints usage or renders reports, imports no go-plugin or
// Argo Rollouts RPC type, and never reads, logs or changes object data, labels or
// annotations.
package plugin
