package plugin

import (
	"context"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/configmap-attacher/configmap-attacher/test/support/fakemeta"
)

// TestCreationWaitIsTheAttachers: a listed object that never appears is waited for the
// Attacher's CreationWait, not for the default, and then reported missing.
func TestCreationWaitIsTheAttachers(t *testing.T) {
	a := &Attacher{Meta: fakemeta.New(fake.NewClientset()), CreationWait: 50 * time.Millisecond}
	w := Write{Object: Object{Kind: KindConfigMap, Name: "late"}, Listed: true,
		Owners: []Owner{{Kind: "ReplicaSet", Name: "web-1", UID: "uid-rs"}}}
	t0 := time.Now()
	err := a.writeOne(context.Background(), "ns", &w)
	if took := time.Since(t0); took > 2*time.Second {
		t.Errorf("waited %v for the missing object, want about CreationWait (50ms)", took)
	}
	if !isNotFound(err) {
		t.Errorf("writeOne = %v, want not found", err)
	}
}
