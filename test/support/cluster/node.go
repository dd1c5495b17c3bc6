package cluster

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// CreateReadyNode creates a Node named name that is Ready and untainted, so that the
// DaemonSet controller makes a pod for it. No kubelet runs for it: nothing schedules pods onto
// it (the fake kubelet, where a test has one, runs every pod).
func CreateReadyNode(ctx context.Context, cs kubernetes.Interface, name string) error {
	n, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels: map[string]string{corev1.LabelHostname: name, corev1.LabelOSStable: "linux"}}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create Node: %w", err)
	}
	// The apiserver's TaintNodesByCondition admission taints a new Node not-ready:NoSchedule
	// (the node lifecycle controller, not run here, lifts it); DaemonSet pods do not tolerate it.
	n.Spec.Taints = nil
	if n, err = cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("untaint Node: %w", err)
	}
	now := metav1.Now()
	res := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("16Gi"), corev1.ResourcePods: resource.MustParse("110")}
	n.Status = corev1.NodeStatus{Capacity: res, Allocatable: res,
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			LastHeartbeatTime: now, LastTransitionTime: now}},
		Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}}
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("status of the Node: %w", err)
	}
	return nil
}
