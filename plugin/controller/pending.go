package controller

// The reconcile's own memory: the owner references it wrote that the cache does not show yet
// (so the cache lagging behind our own patch never sends it twice), and when an add event made
// an object due (the reaction-time histogram).

import (
	"time"

	"github.com/configmap-attacher/configmap-attacher/plugin"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// pendingTTL is how long an owner reference we wrote counts as present before the cache
// shows it (see Controller.pending).
const pendingTTL = 30 * time.Second

// pendingOwners are the owner references written on one object and not yet in its cache.
type pendingOwners struct {
	uids map[types.UID]bool
	at   time.Time
	// object is the UID of the object they were written on.
	object types.UID
}

// settle drops the pending references the cache now shows.
func (c *Controller) settle(k Key, owners []types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.pending[k]
	if !ok {
		return
	}
	for _, uid := range owners {
		delete(p.uids, uid)
	}
	if len(p.uids) == 0 {
		delete(c.pending, k)
	}
}

// ownersWithPending is the object's owner list plus the references we wrote that the cache
// does not show yet (expired after pendingTTL, so a reference someone removed is re-added;
// dropped when the name now belongs to another object).
func (c *Controller) ownersWithPending(k Key, m *cachedObject) []metav1.OwnerReference {
	out := make([]metav1.OwnerReference, 0, len(m.Owners))
	for _, uid := range m.Owners {
		out = append(out, metav1.OwnerReference{UID: uid})
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.pending[k]
	if !ok {
		return out
	}
	if time.Since(p.at) > pendingTTL || p.object != m.UID {
		delete(c.pending, k)
		return out
	}
	for uid := range p.uids {
		out = append(out, metav1.OwnerReference{UID: uid})
	}
	return out
}

func (c *Controller) markPending(k Key, object types.UID, rss []plugin.Owner) {
	c.mu.Lock()
	p, ok := c.pending[k]
	if !ok || p.object != object {
		p = pendingOwners{uids: map[types.UID]bool{}, object: object}
	}
	p.at = time.Now()
	for _, rs := range rss {
		p.uids[rs.UID] = true
	}
	c.pending[k] = p
	c.mu.Unlock()
	// Look again once the pending references expire: if the cache never showed them (someone
	// stripped the owner list meanwhile), the object must not wait for the next resync.
	c.queue.AddAfter(k, pendingTTL+time.Second)
}

// reacted observes the reaction time of k's add event, if one is due.
func (c *Controller) reacted(k Key, observe bool) {
	c.mu.Lock()
	t, ok := c.seen[k]
	delete(c.seen, k)
	c.mu.Unlock()
	if ok && observe {
		c.m.Reaction.Observe(time.Since(t).Seconds())
	}
}
