// Package controller is configmap-attacher's controller mode (`configmap-attacher controller`):
// a watcher that makes every opted-in ConfigMap and Secret a dependent of the objects that
// stand for its users' lifetimes, on every rollout path, through the same core as the step
// and the Job: plugin.Attacher.Reconcile, the one write entry point (one add-only strategic
// merge patch, merged by UID, through the metadata client).
//
// An object is adopted when a live user of a watched kind uses it: a ReplicaSet of a Rollout
// or Deployment, a StatefulSet's or DaemonSet's revision, a Job, a CronJob, a bare Pod. Once
// adopted, every user in its namespace owns it, through the object that stands for its
// lifetime: a ReplicaSet, a revision, a Job, a bare Pod, or the anchor (a ControllerRevision
// this controller creates) of a workload's current template. Work is keyed by object
// (namespace/kind/name): one patch carries every owner it lacks.
//
// The loop, from the informers' events to the core, is controller.go, in the order an event
// travels. The rest, one concern a file:
//
//	config.go     Config and LeaderElection (what the flags set), the defaults
//	informers.go  the informers of one scope (a namespace, or all), their transforms and indexes
//	cache.go      the compact records the caches keep (cachedReplicaSet, cachedObject)
//	users.go      the users' caches (workloads, pod templates) and view, the core's UserView
//	owners.go     the owners other than ReplicaSets: the ControllerRevision cache, Jobs, bare Pods
//	adoption.go   which objects are the controller's candidates (watchedUser)
//	outcome.go    what a reconcile's result becomes: logs, counters, Warning Events, failure reasons
//	pending.go    the references written and not yet cached, and the reaction clock
//	anchors.go    the anchors of workloads' current templates: created and deleted by one rule
//	crowd.go      the crowd anchor that stands for an object's many Jobs and Pods
//	scopes.go     degraded operation: scopes whose caches do not sync left out; readiness
//	lease.go      leader election on a Lease, and the marks the Lease carries
//	gauges.go     the unowned and lost gauges, from the caches
//	metrics.go    the Prometheus metrics and the request counter
//	eventsink.go  the Event sink, with its panics recovered
//	discovery.go  which Argo Rollouts kinds the apiserver serves
//	process.go    the controller as one process: clients, listeners, RunProcess
//
// ConfigMaps and Secrets are watched as metadata only, with managedFields, labels and
// annotations dropped (kubectl's last-applied-configuration annotation of a Secret holds its
// data); object data is never requested.
package controller
