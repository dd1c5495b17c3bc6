package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ServiceAccountConfig returns a rest.Config for a non-admin identity: it creates
// ServiceAccount ns/name, binds exactly rules (Role + RoleBinding "<name>" in ns) and
// clusterRules (ClusterRole + ClusterRoleBinding "<ns>-<name>"), each only when non-empty,
// waits until the authorizer grants every rule, and authenticates with a real token from the
// TokenRequest API (24 h). The identity is system:serviceaccount:<ns>:<name> in the groups
// system:serviceaccounts, system:serviceaccounts:<ns> and system:authenticated, so RBAC,
// max-inflight limits and API priority and fairness apply as for a real controller.
// QPS/Burst are left at client-go's defaults. The objects go away with the namespace; the
// cluster-scoped ones are deleted in t.Cleanup.
func (c *Cluster) ServiceAccountConfig(t testing.TB, ns, name string, rules, clusterRules []rbacv1.PolicyRule) *rest.Config {
	t.Helper()
	cs := c.Client(t)
	ctx := context.Background()
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ServiceAccount %s/%s: %v", ns, name, err)
	}
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}}
	if len(rules) > 0 {
		if _, err := cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create Role %s/%s: %v", ns, name, err)
		}
		if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name}, Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create RoleBinding %s/%s: %v", ns, name, err)
		}
	}
	if len(clusterRules) > 0 {
		crName := ns + "-" + name
		if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: crName}, Rules: clusterRules}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create ClusterRole %s: %v", crName, err)
		}
		if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: crName}, Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: crName},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create ClusterRoleBinding %s: %v", crName, err)
		}
		t.Cleanup(func() {
			if c.apiserver.running() {
				_ = cs.RbacV1().ClusterRoleBindings().Delete(context.Background(), crName, metav1.DeleteOptions{})
				_ = cs.RbacV1().ClusterRoles().Delete(context.Background(), crName, metav1.DeleteOptions{})
			}
		})
	}
	user := fmt.Sprintf("system:serviceaccount:%s:%s", ns, name)
	c.WaitForRBAC(t, user, ns, rules)
	c.WaitForRBAC(t, user, "", clusterRules)

	cfg, err := c.serviceAccountToken(ctx, cs, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// serviceAccountToken returns a rest.Config with a token (24 h) from the TokenRequest API for
// ServiceAccount ns/name.
func (c *Cluster) serviceAccountToken(ctx context.Context, cs kubernetes.Interface, ns, name string) (*rest.Config, error) {
	exp := int64(24 * 3600)
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("TokenRequest for %s/%s: %w", ns, name, err)
	}
	return &rest.Config{
		Host:            c.Host,
		BearerToken:     tr.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.pki.caCert},
	}, nil
}

// ServiceAccountKubeconfig requests a token (24 h) for the existing ServiceAccount ns/name and
// writes a kubeconfig with it into dir, for a child process that runs as that identity.
func ServiceAccountKubeconfig(ctx context.Context, c *Cluster, cs kubernetes.Interface, ns, name, dir string) (string, error) {
	cfg, err := c.serviceAccountToken(ctx, cs, ns, name)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, fmt.Sprintf("kubeconfig-%s-%s.yaml", ns, name))
	return path, writeKubeconfig(path, cfg, name)
}

// WaitForRBAC waits (up to 10 s) until a SubjectAccessReview grants user the first verb,
// apiGroup, resource (and resourceName) or non-resource URL of every rule, in namespace ns
// ("" for cluster scope). RBAC changes reach the authorizer through informers, so a request
// made right after creating a binding can still be denied.
func (c *Cluster) WaitForRBAC(t testing.TB, user, ns string, rules []rbacv1.PolicyRule) {
	t.Helper()
	cs := c.Client(t)
	first := func(s []string) string {
		if len(s) == 0 {
			return ""
		}
		return s[0]
	}
	for _, r := range rules {
		var spec authorizationv1.SubjectAccessReviewSpec
		if len(r.NonResourceURLs) > 0 {
			spec.NonResourceAttributes = &authorizationv1.NonResourceAttributes{Path: r.NonResourceURLs[0], Verb: first(r.Verbs)}
		} else {
			res, sub, _ := strings.Cut(first(r.Resources), "/")
			spec.ResourceAttributes = &authorizationv1.ResourceAttributes{
				Namespace: ns, Verb: first(r.Verbs), Group: first(r.APIGroups),
				Resource: res, Subresource: sub, Name: first(r.ResourceNames),
			}
		}
		if sar, err := waitForAccess(context.Background(), cs, user, spec, 10*time.Second, 20*time.Millisecond); sar == nil || !sar.Status.Allowed {
			t.Fatalf("RBAC for %s not effective after 10s: rule %+v (err %v, status %+v)", user, r, err, sar)
		}
	}
}

// WaitForAccess waits (up to 15 s) until a SubjectAccessReview allows user (a ServiceAccount
// "system:serviceaccount:<ns>:<name>" or another user) the access a describes: RBAC reaches
// the authorizer through informers. For identities made outside ServiceAccountConfig (applied
// manifests, examples/*.yaml).
func WaitForAccess(ctx context.Context, cs kubernetes.Interface, user string, a authorizationv1.ResourceAttributes) error {
	sar, err := waitForAccess(ctx, cs, user, authorizationv1.SubjectAccessReviewSpec{ResourceAttributes: &a}, 15*time.Second, 50*time.Millisecond)
	if sar == nil || !sar.Status.Allowed {
		return fmt.Errorf("RBAC: %s still may not %s %s.%s in %q after 15s (%v)", user, a.Verb, a.Resource, a.Group, a.Namespace, err)
	}
	return nil
}

// waitForAccess repeats the SubjectAccessReview spec for user (with the groups a ServiceAccount
// has) every poll until it is allowed or timeout has passed, and returns the last answer.
func waitForAccess(ctx context.Context, cs kubernetes.Interface, user string, spec authorizationv1.SubjectAccessReviewSpec, timeout, poll time.Duration) (*authorizationv1.SubjectAccessReview, error) {
	spec.User, spec.Groups = user, []string{"system:authenticated"}
	if parts := strings.Split(user, ":"); len(parts) == 4 && parts[1] == "serviceaccount" {
		spec.Groups = append(spec.Groups, "system:serviceaccounts", "system:serviceaccounts:"+parts[2])
	}
	deadline := time.Now().Add(timeout)
	for {
		sar, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
		if (err == nil && sar.Status.Allowed) || time.Now().After(deadline) {
			return sar, err
		}
		time.Sleep(poll)
	}
}

// Kubectl runs the cluster's kubectl as admin; the error carries its combined output.
func Kubectl(c *Cluster, args ...string) error {
	cmd := exec.Command(filepath.Join(c.BinDir, "kubectl"), append([]string{"--kubeconfig", c.KubeconfigPath}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// WriteKubeconfig writes cfg (host, CA, client certificate or bearer token) as a kubeconfig
// file in the cluster's state directory and returns its path, for child processes.
func (c *Cluster) WriteKubeconfig(t testing.TB, cfg *rest.Config) string {
	t.Helper()
	f, err := os.CreateTemp(c.Dir, "kubeconfig-*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := writeKubeconfig(f.Name(), cfg, "user"); err != nil {
		t.Fatalf("write kubeconfig: %v", err)
	}
	return f.Name()
}

func readOpt(data []byte, file string) ([]byte, error) {
	if len(data) > 0 || file == "" {
		return data, nil
	}
	return os.ReadFile(file)
}

func writeKubeconfig(path string, cfg *rest.Config, user string) error {
	ca, err := readOpt(cfg.CAData, cfg.CAFile)
	if err != nil {
		return err
	}
	cert, err := readOpt(cfg.CertData, cfg.CertFile)
	if err != nil {
		return err
	}
	key, err := readOpt(cfg.KeyData, cfg.KeyFile)
	if err != nil {
		return err
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["cma"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: ca, TLSServerName: cfg.ServerName, InsecureSkipTLSVerify: cfg.Insecure}
	kc.AuthInfos[user] = &clientcmdapi.AuthInfo{
		ClientCertificateData: cert, ClientKeyData: key,
		Token: cfg.BearerToken, TokenFile: cfg.BearerTokenFile,
		Impersonate: cfg.Impersonate.UserName, ImpersonateGroups: cfg.Impersonate.Groups,
	}
	kc.Contexts["cma"] = &clientcmdapi.Context{Cluster: "cma", AuthInfo: user}
	kc.CurrentContext = "cma"
	return clientcmd.WriteToFile(*kc, path)
}
