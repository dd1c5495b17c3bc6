package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// ApplyYAMLFile is ApplyYAML on the contents of a file (e.g. examples/rbac-step-plugin.yaml).
func (c *Cluster) ApplyYAMLFile(t testing.TB, cfg *rest.Config, path, namespace string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("ApplyYAMLFile: %v", err)
	}
	return c.ApplyYAML(t, cfg, data, namespace)
}

// ApplyYAML server-side applies (field manager "cluster-test", forced) every object of a
// multi-document YAML or JSON stream, in order, as cfg (nil: admin), and returns them as
// applied. Any kind the server knows works (ServiceAccount, Role, ClusterRole, RoleBinding,
// ClusterRoleBinding, ConfigMap, CRDs, ...).
//
// With namespace != "", namespaced objects go to that namespace, ServiceAccount subjects of
// RoleBindings and ClusterRoleBindings are moved to it, and ClusterRoleBindings are renamed
// "<name>-<namespace>" so that tests in different namespaces do not rebind each other's
// subjects (they are deleted in t.Cleanup); ClusterRoles keep their names (they are shared,
// identical cluster-wide). With
// namespace == "", namespaced objects without a namespace go to "default".
// RBAC objects are applied before the call returns but may take a moment to take effect; use
// WaitForRBAC when a test depends on them immediately.
func (c *Cluster) ApplyYAML(t testing.TB, cfg *rest.Config, data []byte, namespace string) []*unstructured.Unstructured {
	t.Helper()
	if cfg == nil {
		cfg = c.AdminConfig
	}
	dc, err := discovery.NewDiscoveryClientForConfig(c.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		var raw map[string]interface{}
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("ApplyYAML: decode: %v", err)
		}
		if len(raw) == 0 {
			continue
		}
		obj := &unstructured.Unstructured{Object: raw}
		if obj.GetKind() == "List" {
			t.Fatal("ApplyYAML: kind List is not supported; use a multi-document stream")
		}
		gvk := obj.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if meta.IsNoMatchError(err) { // e.g. a CRD created by an earlier document
			mapper.Reset()
			mapping, err = mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		}
		if err != nil {
			t.Fatalf("ApplyYAML: %s %s: %v", gvk, obj.GetName(), err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			switch {
			case namespace != "":
				obj.SetNamespace(namespace)
			case obj.GetNamespace() == "":
				obj.SetNamespace("default")
			}
			ri = dyn.Resource(mapping.Resource).Namespace(obj.GetNamespace())
		}
		if namespace != "" && gvk.Group == "rbac.authorization.k8s.io" && (gvk.Kind == "RoleBinding" || gvk.Kind == "ClusterRoleBinding") {
			subjects, _, _ := unstructured.NestedSlice(obj.Object, "subjects")
			for _, s := range subjects {
				if m, ok := s.(map[string]interface{}); ok && m["kind"] == "ServiceAccount" {
					m["namespace"] = namespace
				}
			}
			if subjects != nil {
				_ = unstructured.SetNestedSlice(obj.Object, subjects, "subjects")
			}
			if gvk.Kind == "ClusterRoleBinding" {
				obj.SetName(obj.GetName() + "-" + namespace)
			}
		}
		body, err := json.Marshal(obj.Object)
		if err != nil {
			t.Fatal(err)
		}
		force := true
		applied, err := ri.Patch(context.Background(), obj.GetName(), types.ApplyPatchType, body,
			metav1.PatchOptions{FieldManager: "cluster-test", Force: &force})
		if err != nil {
			t.Fatalf("ApplyYAML: apply %s %s/%s: %v", gvk.Kind, obj.GetNamespace(), obj.GetName(), err)
		}
		if namespace != "" && gvk.Kind == "ClusterRoleBinding" {
			name := applied.GetName()
			t.Cleanup(func() { _ = ri.Delete(context.Background(), name, metav1.DeleteOptions{}) })
		}
		out = append(out, applied)
	}
	return out
}
