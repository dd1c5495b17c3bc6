package doctor

import (
	"context"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	psapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/yaml"
)

// stepPlugin is one entry of argo-rollouts-config's stepPlugins, as Argo Rollouts reads it
// (utils/plugin/types PluginItem).
type stepPlugin struct {
	Name        string           `json:"name"`
	Location    string           `json:"location"`
	Sha256      string           `json:"sha256,omitempty"`
	Args        []string         `json:"args,omitempty"`
	Disabled    bool             `json:"disabled,omitempty"`
	HeadersFrom []map[string]any `json:"headersFrom,omitempty"`
}

// MinRolloutsVersion is the first Argo Rollouts release with step plugins.
var MinRolloutsVersion = [3]int{1, 8, 0}

var (
	// Lowercase only: Argo Rollouts compares the digest with its own %x output as strings.
	sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)
	semverTag = regexp.MustCompile(`^v?(\d+)\.(\d+)\.(\d+)`)
)

const (
	fixRegister = "add the entry of examples/argo-rollouts-config.yaml (or examples/helm-values.yaml's controller.stepPlugins) to stepPlugins, then restart the controller (docs/install.md)"
	fixInit     = "add the initContainer running `install-plugin /plugins`, its emptyDir and the controller's mount at the location's directory (examples/argo-rollouts-config.yaml comments, examples/helm-values.yaml)"
)

// installContainer is the initContainer of examples/helm-values.yaml, used to ask whether
// Pod Security would admit the controller's pod once it is added.
func installContainer() corev1.Container {
	t, f := true, false
	return corev1.Container{Name: "install-configmap-attacher", Image: "ghcr.io/configmap-attacher/configmap-attacher:v0.1.0",
		Args: []string{"install-plugin", "/plugins"},
		SecurityContext: &corev1.SecurityContext{RunAsNonRoot: &t, SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			AllowPrivilegeEscalation: &f, ReadOnlyRootFilesystem: &t, Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
		VolumeMounts: []corev1.VolumeMount{{Name: "configmap-attacher-plugin", MountPath: "/plugins"}}}
}

// checkStep: the registration, the location, the controller version and Pod Security.
func (d *Doctor) checkStep(ctx context.Context, r *Report) {
	o := d.Opts
	cmSubject := "ConfigMap " + o.RolloutsNamespace + "/" + o.RolloutsConfigMap
	entry := d.checkRegistration(ctx, r, cmSubject)

	depSubject := "Deployment " + o.RolloutsNamespace + "/" + o.RolloutsDeployment
	cctx, cancel := d.call(ctx)
	dep, err := d.Kube.AppsV1().Deployments(o.RolloutsNamespace).Get(cctx, o.RolloutsDeployment, metav1.GetOptions{})
	cancel()
	if err != nil {
		fix := "pass -rollouts-namespace and -rollouts-deployment of your Argo Rollouts controller"
		if !apierrors.IsNotFound(err) {
			fix = "grant the identity running doctor get on deployments in " + o.RolloutsNamespace
		}
		r.problem(Error, "step/controller", depSubject, fix, "cannot read the Argo Rollouts controller: %v", err)
		return
	}
	ctr := rolloutsContainer(dep)
	// The RBAC check asks about -rollouts-service-account: a controller running as another one
	// would pass it and still be refused.
	if sa := dep.Spec.Template.Spec.ServiceAccountName; sa != "" && sa != o.RolloutsServiceAccount {
		r.problem(Error, "step/controller", depSubject, "pass -rollouts-service-account "+sa,
			"runs as ServiceAccount %s, not %s (whose RBAC this run checks)", sa, o.RolloutsServiceAccount)
	}
	if entry != nil && strings.HasPrefix(entry.Location, "file://") {
		d.checkFileLocation(r, dep, ctr, entry.Location)
	}
	d.checkVersion(r, depSubject, ctr)
	d.checkPodSecurity(ctx, r, dep)
}

// checkRegistration parses stepPlugins and returns our entry (nil: none usable).
func (d *Doctor) checkRegistration(ctx context.Context, r *Report, subject string) *stepPlugin {
	o := d.Opts
	cctx, cancel := d.call(ctx)
	// The one ConfigMap whose data doctor reads: it is the controller's plugin configuration,
	// not user config, and only its stepPlugins key is parsed.
	cm, err := d.Kube.CoreV1().ConfigMaps(o.RolloutsNamespace).Get(cctx, o.RolloutsConfigMap, metav1.GetOptions{})
	cancel()
	if apierrors.IsNotFound(err) {
		r.problem(Error, "step/registration", subject, fixRegister, "not found: the Argo Rollouts controller has no plugin configuration")
		return nil
	}
	if err != nil {
		r.problem(Error, "step/registration", subject, "grant the identity running doctor get on configmaps in "+o.RolloutsNamespace, "cannot read it: %v", err)
		return nil
	}
	raw, ok := cm.Data["stepPlugins"]
	if !ok {
		r.problem(Error, "step/registration", subject, fixRegister, "has no stepPlugins key")
		return nil
	}
	// Parsed as the controller parses it (utils/config: plain yaml.Unmarshal), so what it
	// accepts passes; a key it ignores (a typo, or a newer release's field) is a warning.
	var entries []stepPlugin
	if err := yaml.Unmarshal([]byte(raw), &entries); err != nil {
		r.problem(Error, "step/registration", subject, "fix the YAML of stepPlugins: a list of {name, location, sha256, args, disabled, headersFrom}; the controller refuses to start on it",
			"stepPlugins does not parse: %v", err)
		return nil
	}
	if err := yaml.UnmarshalStrict([]byte(raw), new([]stepPlugin)); err != nil {
		r.problem(Warning, "step/registration", subject, "remove or correct the key: a misspelt one (locaton) leaves its field empty",
			"stepPlugins has a key the controller ignores: %v", err)
	}
	var entry *stepPlugin
	for i := range entries {
		if entries[i].Name == o.PluginName {
			if entry != nil {
				r.problem(Error, "step/registration", subject, "keep one entry named "+o.PluginName, "stepPlugins names %s twice", o.PluginName)
				break
			}
			entry = &entries[i]
		}
	}
	if entry == nil {
		r.problem(Error, "step/registration", subject, fixRegister, "stepPlugins has no entry named %q (Rollout steps name the plugin by it)", o.PluginName)
		return nil
	}
	r.ok("step/registration", subject, "stepPlugins has %s at %s", o.PluginName, entry.Location)
	if entry.Disabled {
		r.problem(Warning, "step/registration", subject, "remove disabled: true once the plugin should run; meanwhile run `configmap-attacher audit -A -fix` or the controller mode",
			"the entry is disabled: every step naming it is skipped and its objects get no owner")
	}
	u, err := url.Parse(entry.Location)
	switch {
	case entry.Location == "" || err != nil:
		r.problem(Error, "step/location", subject, "set location to file:///home/argo-rollouts/plugins/configmap-attacher (the initContainer install) or the release asset's https:// URL with its sha256",
			"location %q is not a URL", entry.Location)
		return nil
	case u.Scheme == "file":
		if path.Base(u.Path) != "configmap-attacher" {
			r.problem(Error, "step/location", subject, "end the location with /configmap-attacher, the file install-plugin writes",
				"location %q: install-plugin writes DIR/configmap-attacher, not %s", entry.Location, path.Base(u.Path))
		}
	case u.Scheme == "https" || u.Scheme == "http":
		switch {
		case entry.Sha256 == "":
			r.problem(Error, "step/location", subject, "set sha256 to the asset's 64-hex digest from the release's checksums.txt",
				"location %s is downloaded without a sha256: the binary is not verified", entry.Location)
		case !sha256Hex.MatchString(entry.Sha256):
			r.problem(Error, "step/location", subject, "set sha256 to the asset's 64-hex digest, in lowercase, from the release's checksums.txt",
				"sha256 %q is not 64 lowercase hex characters: the controller never matches it and refuses to start", entry.Sha256)
		default:
			r.ok("step/location", subject, "https location with a sha256")
		}
		if u.Scheme == "http" {
			r.problem(Warning, "step/location", subject, "download over https", "location %s is plain http", entry.Location)
		}
	default:
		r.problem(Error, "step/location", subject, "use file:// (the initContainer install) or https:// with sha256 (docs/install.md)",
			"location %q: scheme %q is neither file nor https", entry.Location, u.Scheme)
		return nil
	}
	return entry
}

// rolloutsContainer is the controller's container: the one named argo-rollouts, else the first.
func rolloutsContainer(dep *appsv1.Deployment) *corev1.Container {
	cs := dep.Spec.Template.Spec.Containers
	for i := range cs {
		if cs[i].Name == "argo-rollouts" {
			return &cs[i]
		}
	}
	if len(cs) > 0 {
		return &cs[0]
	}
	return nil
}

// checkFileLocation: a file:// location needs a volume mounted at its directory in the
// controller's container and an initContainer that runs install-plugin into the same volume.
func (d *Doctor) checkFileLocation(r *Report, dep *appsv1.Deployment, ctr *corev1.Container, location string) {
	subject := "Deployment " + dep.Namespace + "/" + dep.Name
	if ctr == nil {
		r.problem(Error, "step/location", subject, "pass -rollouts-deployment of your Argo Rollouts controller", "has no container")
		return
	}
	file := strings.TrimPrefix(location, "file://")
	dir := path.Dir(file)
	var mount *corev1.VolumeMount
	for i := range ctr.VolumeMounts {
		m := &ctr.VolumeMounts[i]
		if strings.TrimSuffix(m.MountPath, "/") == dir {
			mount = m
		}
	}
	if mount == nil {
		r.problem(Error, "step/location", subject, fixInit,
			"container %s mounts no volume at %s, the directory of location %s: the controller will not find the plugin and refuses to start", ctr.Name, dir, location)
		return
	}
	for _, ic := range dep.Spec.Template.Spec.InitContainers {
		args := append(append([]string(nil), ic.Command...), ic.Args...)
		for i, a := range args {
			if a != "install-plugin" || i+1 >= len(args) {
				continue
			}
			for _, m := range ic.VolumeMounts {
				if m.Name == mount.Name && path.Clean(m.MountPath) == path.Clean(args[i+1]) {
					r.ok("step/location", subject, "initContainer %s installs into volume %s, mounted at %s in %s", ic.Name, mount.Name, dir, ctr.Name)
					return
				}
			}
		}
	}
	r.problem(Error, "step/location", subject, fixInit,
		"no initContainer runs `install-plugin DIR` with volume %s mounted at DIR: %s stays empty and the controller refuses to start", mount.Name, dir)
}

// checkVersion: the controller image's tag must be a release with step plugins.
func (d *Doctor) checkVersion(r *Report, subject string, ctr *corev1.Container) {
	if ctr == nil {
		return
	}
	image := ctr.Image
	if i := strings.Index(image, "@"); i >= 0 {
		image = image[:i]
	}
	tag := ""
	if i := strings.LastIndex(image, ":"); i >= 0 && !strings.Contains(image[i:], "/") {
		tag = image[i+1:]
	}
	m := semverTag.FindStringSubmatch(tag)
	if m == nil {
		r.problem(Warning, "step/version", subject, "run Argo Rollouts v1.8 or newer (tested: v1.10.2, v1.9.1); tag the image with its version",
			"image %s has no version tag: cannot tell whether it supports step plugins", ctr.Image)
		return
	}
	var v [3]int
	for i := range v {
		v[i], _ = strconv.Atoi(m[i+1])
	}
	min := MinRolloutsVersion
	if v[0] < min[0] || (v[0] == min[0] && v[1] < min[1]) {
		r.problem(Error, "step/version", subject, "upgrade Argo Rollouts to v1.8 or newer (tested: v1.10.2, v1.9.1)",
			"image %s is Argo Rollouts %s: step plugins need v%d.%d or newer", ctr.Image, tag, min[0], min[1])
		return
	}
	r.ok("step/version", subject, "Argo Rollouts %s supports step plugins", tag)
}

// checkPodSecurity evaluates the controller's pod template, with our initContainer (added
// when it is not there yet), against its namespace's enforce level, with Kubernetes' own
// Pod Security evaluator.
func (d *Doctor) checkPodSecurity(ctx context.Context, r *Report, dep *appsv1.Deployment) {
	subject := "Namespace " + dep.Namespace
	cctx, cancel := d.call(ctx)
	ns, err := d.Kube.CoreV1().Namespaces().Get(cctx, dep.Namespace, metav1.GetOptions{})
	cancel()
	if err != nil {
		r.problem(Warning, "step/pod-security", subject, "grant the identity running doctor get on namespaces", "cannot read its Pod Security labels: %v", err)
		return
	}
	level, err := psapi.ParseLevel(ns.Labels[psapi.EnforceLevelLabel])
	if ns.Labels[psapi.EnforceLevelLabel] == "" {
		level, err = psapi.LevelPrivileged, nil
	}
	if err != nil {
		r.problem(Warning, "step/pod-security", subject, "set "+psapi.EnforceLevelLabel+" to privileged, baseline or restricted", "%v", err)
		return
	}
	version := psapi.LatestVersion()
	if v := ns.Labels[psapi.EnforceVersionLabel]; v != "" {
		if version, err = psapi.ParseVersion(v); err != nil {
			r.problem(Warning, "step/pod-security", subject, "set "+psapi.EnforceVersionLabel+" to latest or v1.N", "%v", err)
			return
		}
	}
	tmpl := dep.Spec.Template.DeepCopy()
	added := true
	for _, ic := range tmpl.Spec.InitContainers {
		// As checkFileLocation: install-plugin in the command or the args.
		if slices.Contains(append(append([]string(nil), ic.Command...), ic.Args...), "install-plugin") {
			added = false
		}
	}
	if added {
		tmpl.Spec.InitContainers = append(tmpl.Spec.InitContainers, installContainer())
	}
	eval, err := policy.NewEvaluator(policy.DefaultChecks())
	if err != nil {
		r.problem(Error, "step/pod-security", subject, "report this as a bug", "Pod Security evaluator: %v", err)
		return
	}
	res := policy.AggregateCheckResults(eval.EvaluatePod(psapi.LevelVersion{Level: level, Version: version}, &tmpl.ObjectMeta, &tmpl.Spec))
	with := "with its install-plugin initContainer"
	if added {
		with = "with examples/helm-values.yaml's initContainer added"
	}
	if !res.Allowed {
		r.problem(Error, "step/pod-security", subject,
			"give the pod and every container the restricted securityContext of examples/helm-values.yaml (runAsNonRoot, seccompProfile RuntimeDefault, allowPrivilegeEscalation false, capabilities drop ALL), or lower "+psapi.EnforceLevelLabel,
			"enforce=%s refuses the pod of Deployment %s %s: %s", level, dep.Name, with, res.ForbiddenDetail())
		return
	}
	r.ok("step/pod-security", subject, "enforce=%s admits the pod of Deployment %s %s", level, dep.Name, with)
}
