// Package plugin is the ownership core of configmap-attacher, shared by every mode (the step
// plugin, the command line, audit -fix and the controller): it decides which ReplicaSets
// become owners of which ConfigMaps and Secrets, and writes that as add-only merge patches.
//
// Where to start reading:
//   - refs.go: which objects a pod template uses (TemplateReferences, RequiredReferences).
//   - core.go: Attacher.Reconcile, the one write entry point of every mode; users.go: who
//     uses an object in its namespace (every user counts: NamespaceUsage, ReadUsage, UserView);
//     rules.go: classify (the rule table of an explicit list) and checkLabels (the opt-in
//     policy); adopt.go: discover, Candidate and planWrites, the rules every candidate goes
//     through; write.go: write, which sends the patches; messages.go: what is reported.
//   - owners.go: MissingOwners (the one missing-owner computation), ownerPatchFor (the patch,
//     keyed by owner UID, with the object's UID as a precondition) and addOwners.
//   - step.go and job.go: the two modes that find a target and wait (Step.Run, WaitAndAttach).
//
// The package never parses flags, prints usage or renders reports (plugin/cmd,
// plugin/audit), and never reads, logs or changes object data, labels or annotations.
package plugin
