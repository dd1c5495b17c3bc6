package doctor

import (
	"context"
	"fmt"
	"slices"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// need is one permission a mode needs: verbs on a resource, in the application namespaces
// (own false) or in the mode's own namespace (own true: the controller's Lease).
type need struct {
	group, resource string
	verbs           []string
	own             bool
}

// needs are the permissions of each mode, as docs/security.md lists them ("RBAC per mode")
// and the examples grant them.
func (d *Doctor) needs(mode string) []need {
	var n []need
	switch mode {
	case ModeStep:
		n = []need{
			{"", "configmaps", []string{"get", "list", "watch", "patch"}, false},
			{"", "secrets", []string{"get", "list", "watch", "patch"}, false},
			{"apps", "replicasets", []string{"list"}, false},
			{"apps", "deployments", []string{"list"}, false},
			{"apps", "statefulsets", []string{"list"}, false},
			{"apps", "daemonsets", []string{"list"}, false},
			// The StatefulSets' and DaemonSets' revisions stand for their Pods' specs (degrades).
			{"apps", "controllerrevisions", []string{"list"}, false},
			{"batch", "jobs", []string{"list"}, false},
			{"batch", "cronjobs", []string{"list"}, false},
			{"", "pods", []string{"list"}, false},
			{"argoproj.io", "rollouts", []string{"list"}, false},
			{"argoproj.io", "experiments", []string{"list"}, false},
			{"", "events", []string{"create"}, false},
		}
	case ModeController:
		n = []need{
			{"apps", "replicasets", []string{"list", "watch", "get"}, false},
			{"apps", "deployments", []string{"list", "watch", "get"}, false},
			{"argoproj.io", "rollouts", []string{"list", "watch", "get"}, false},
			{"argoproj.io", "experiments", []string{"list", "watch", "get"}, false},
			{"apps", "statefulsets", []string{"list", "watch", "get"}, false},
			{"apps", "daemonsets", []string{"list", "watch", "get"}, false},
			{"apps", "controllerrevisions", []string{"list", "watch", "get", "create", "delete"}, false},
			{"", "namespaces", []string{"get"}, false},
			{"batch", "jobs", []string{"list", "watch", "get"}, false},
			{"batch", "cronjobs", []string{"list", "watch", "get"}, false},
			{"", "pods", []string{"list", "watch", "get"}, false},
			{"", "configmaps", []string{"list", "watch", "patch"}, false},
			{"", "secrets", []string{"list", "watch", "patch"}, false},
			{"", "events", []string{"create", "patch"}, false},
			{"coordination.k8s.io", "leases", []string{"get", "create", "update"}, true},
		}
	case ModeJob:
		n = []need{
			{"argoproj.io", "rollouts", []string{"get", "list"}, false},
			{"argoproj.io", "experiments", []string{"list"}, false},
			{"apps", "replicasets", []string{"list"}, false},
			{"apps", "deployments", []string{"get", "list"}, false},
			{"apps", "statefulsets", []string{"list"}, false},
			{"apps", "daemonsets", []string{"list"}, false},
			{"apps", "controllerrevisions", []string{"list"}, false},
			{"batch", "jobs", []string{"list"}, false},
			{"batch", "cronjobs", []string{"list"}, false},
			{"", "pods", []string{"list"}, false},
			{"", "configmaps", []string{"patch"}, false},
			{"", "secrets", []string{"patch"}, false},
			{"", "events", []string{"create"}, false},
		}
	}
	if mode == ModeController && !d.Opts.LeaderElect {
		// Without leader election the controller takes no Lease (the chart then grants none).
		n = slices.DeleteFunc(n, func(x need) bool { return x.resource == "leases" })
	}
	if d.Opts.OwnerReferencesEnforcement {
		// OwnerReferencesPermissionEnforcement lets only a user who may delete an object change
		// its ownerReferences (docs/security.md).
		n = append(n, need{"", "configmaps", []string{"delete"}, false}, need{"", "secrets", []string{"delete"}, false})
	}
	return n
}

// degrades are the grants the step and the Job do without, and what they do then: a missing
// one is a warning, not an error.
var degrades = map[string]string{
	"controllerrevisions": "reads the specs of the StatefulSets' and DaemonSets' Pods instead of their revisions (more to read in a busy namespace), with a warning",
}

// identity is a mode's ServiceAccount (namespace "" for the Job: each application namespace).
func (d *Doctor) identity(mode string) (ns, name, fix string) {
	o := d.Opts
	switch mode {
	case ModeStep:
		return o.RolloutsNamespace, o.RolloutsServiceAccount, "examples/rbac-step-plugin.yaml (or -namespaced.yaml); with the argo-helm chart providerRBAC.additionalRules of examples/helm-values.yaml"
	case ModeController:
		return o.ControllerNamespace, o.ControllerServiceAccount, "examples/controller.yaml's ClusterRole and Lease Role, or the chart's rbac.* values"
	default:
		return "", o.JobServiceAccount, "examples/job.yaml's Role and RoleBinding in the namespace"
	}
}

// checkRBAC asks the authorizer, with one SubjectAccessReview per verb and resource, whether
// the mode's ServiceAccount may do what the mode needs, in every application namespace
// (cluster-wide when none is given), and reports every missing grant at once.
func (d *Doctor) checkRBAC(ctx context.Context, r *Report, mode string) {
	ns, name, fix := d.identity(mode)
	scopes := d.Opts.Namespaces
	if len(scopes) == 0 {
		if mode == ModeJob {
			r.problem(Error, "rbac/"+mode, "ServiceAccount "+name, "pass -n/--namespace with the namespaces the Job runs in",
				"the Job's ServiceAccount lives in each application namespace: name them")
			return
		}
		scopes = []string{""}
	}
	if d.Opts.OwnerReferencesEnforcement {
		fix += "; for delete: examples/rbac-ownerreferences-enforcement.yaml in the namespace"
	}
	for _, scope := range scopes {
		saNS := ns
		if mode == ModeJob {
			saNS = scope
		}
		user := "system:serviceaccount:" + saNS + ":" + name
		where := "every namespace"
		if scope != "" {
			where = "namespace " + scope
		}
		// Missing grants by where they are missing, in the order checked.
		var wheres, degraded []string
		missing := map[string][]string{}
		checked := 0
		for _, n := range d.needs(mode) {
			target := scope
			if n.own {
				target = d.leaseNamespace()
			}
			for _, verb := range n.verbs {
				checked++
				allowed, err := d.allowed(ctx, user, saNS, verb, n.group, n.resource, target)
				if err != nil {
					r.problem(Error, "rbac/"+mode, user, "grant the identity running doctor create on subjectaccessreviews.authorization.k8s.io",
						"cannot ask the authorizer: %v", err)
					return
				}
				if !allowed {
					res := n.resource
					if n.group != "" {
						res += "." + n.group
					}
					if why, ok := degrades[n.resource]; ok && mode != ModeController {
						degraded = append(degraded, fmt.Sprintf("may not %s %s in %s: the %s mode %s", verb, res, where, mode, why))
						continue
					}
					in := where
					if n.own {
						in = "namespace " + target
					}
					if missing[in] == nil {
						wheres = append(wheres, in)
					}
					missing[in] = append(missing[in], verb+" "+res)
				}
			}
		}
		for _, msg := range degraded {
			r.problem(Warning, "rbac/"+mode, user, "apply "+fix, "%s", msg)
		}
		if len(wheres) > 0 {
			var parts []string
			for _, w := range wheres {
				parts = append(parts, fmt.Sprintf("in %s may not %s", w, strings.Join(missing[w], ", ")))
			}
			r.problem(Error, "rbac/"+mode, user, "apply "+fix, "%s", strings.Join(parts, "; "))
			continue
		}
		r.ok("rbac/"+mode, user, "may do all %d things the %s mode needs in %s", checked, mode, where)
	}
	if mode == ModeStep && d.Opts.LeaderElect {
		d.checkStepLease(ctx, r, ns, name)
	}
}

// checkStepLease: the step plugin finds the controller by its Lease (get, by name, in the
// controller's namespace). Without it the step treats the controller as absent and refuses
// config that other workloads share, with a warning; config of one Rollout alone is attached
// as always, so this is a warning, not an error.
func (d *Doctor) checkStepLease(ctx context.Context, r *Report, saNS, name string) {
	user := "system:serviceaccount:" + saNS + ":" + name
	ns, lease := d.leaseNamespace(), d.Opts.LeaseName
	cctx, cancel := d.call(ctx)
	defer cancel()
	sar, err := d.Kube.AuthorizationV1().SubjectAccessReviews().Create(cctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:               user,
		Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + saNS, "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "get", Group: "coordination.k8s.io", Resource: "leases", Name: lease},
	}}, metav1.CreateOptions{})
	switch {
	case err != nil:
		r.problem(Error, "rbac/step-lease", user, "grant the identity running doctor create on subjectaccessreviews.authorization.k8s.io",
			"cannot ask the authorizer: %v", err)
	case !sar.Status.Allowed:
		r.problem(Warning, "rbac/step-lease", user,
			fmt.Sprintf("bind it to the chart's <fullname>-lease-reader Role in %s (rbac.leaseReaders.subjects; examples/controller.yaml's configmap-attacher-lease-reader), and name the Lease in the plugin's --controller-lease", ns),
			"may not get Lease %s/%s: the step treats the controller as absent and refuses config that other workloads share", ns, lease)
	default:
		r.ok("rbac/step-lease", user, "may get Lease %s/%s (finds the controller that maintains shared config)", ns, lease)
	}
}

func (d *Doctor) leaseNamespace() string {
	if d.Opts.LeaseNamespace != "" {
		return d.Opts.LeaseNamespace
	}
	return d.Opts.ControllerNamespace
}

// allowed sends one SubjectAccessReview for a ServiceAccount (with the groups its token has).
func (d *Doctor) allowed(ctx context.Context, user, saNS, verb, group, resource, ns string) (bool, error) {
	cctx, cancel := d.call(ctx)
	defer cancel()
	sar, err := d.Kube.AuthorizationV1().SubjectAccessReviews().Create(cctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:               user,
		Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + saNS, "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: group, Resource: resource},
	}}, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("SubjectAccessReview %s %s.%s for %s: %w", verb, resource, group, user, err)
	}
	return sar.Status.Allowed, nil
}
