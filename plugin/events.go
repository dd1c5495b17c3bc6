package plugin

import (
	"fmt"
	"os"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/sirupsen/logrus"
)

// Event reasons on the Rollout.
const (
	ReasonAttached     = "ConfigAttached"
	ReasonAttachFailed = "ConfigAttachFailed"
	// ReasonDiscoverWarning: an older ReplicaSet's object could not be given its owner.
	ReasonDiscoverWarning = "ConfigDiscoverWarning"
)

// EventRecorder records a Kubernetes Event on a Rollout.
type EventRecorder interface {
	Event(ro *v1alpha1.Rollout, eventType, reason, message string)
}

// APIEvents writes core/v1 Events (which the argo-rollouts service account may already
// create) synchronously, one request per event: a command-line run has then flushed its
// events when it exits, with no broadcaster to drain. An event that cannot be written is
// logged and otherwise ignored: the step's message and Status stay the primary record.
type APIEvents struct {
	Client ClientFunc
	Log    logrus.FieldLogger
	Now    func() time.Time
}

// Event implements EventRecorder.
func (e *APIEvents) Event(ro *v1alpha1.Rollout, eventType, reason, message string) {
	if ro == nil || e == nil || e.Client == nil {
		return
	}
	clients, err := e.Client()
	if err != nil {
		return
	}
	client := clients.Kube
	now := time.Now()
	if e.Now != nil {
		now = e.Now()
	}
	if len(message) > 1024 { // the apiserver's limit for an event message
		message = message[:1021] + "..."
	}
	host, _ := os.Hostname()
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", ro.Name, now.UnixNano()), Namespace: ro.Namespace},
		InvolvedObject: corev1.ObjectReference{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "Rollout",
			Name: ro.Name, Namespace: ro.Namespace, UID: ro.UID, ResourceVersion: ro.ResourceVersion},
		Reason: reason, Message: message, Type: eventType,
		Source:         corev1.EventSource{Component: "configmap-attacher"},
		FirstTimestamp: metav1.Time{Time: now}, LastTimestamp: metav1.Time{Time: now}, Count: 1,
		ReportingController: "configmap-attacher", ReportingInstance: host,
	}
	if err := createEvent(client, ev); err != nil && e.Log != nil {
		e.Log.WithError(err).WithFields(logrus.Fields{"rollout": ro.Name, "namespace": ro.Namespace}).Warn("could not record an event on the Rollout (needs create on events)")
	}
}

// AsyncEvents hands events to a background writer through a small bounded queue, so that the
// step's latency does not include an Event request. When the queue is full the event is
// dropped and counted in the log: the step's message and Status stay the primary record.
type AsyncEvents struct {
	queue   chan asyncEvent
	log     logrus.FieldLogger
	mu      sync.Mutex
	dropped int
}

type asyncEvent struct {
	ro                      *v1alpha1.Rollout
	eventType, reason, text string
}

// NewAsyncEvents starts the writer; size bounds the queue.
func NewAsyncEvents(inner EventRecorder, size int, log logrus.FieldLogger) *AsyncEvents {
	e := &AsyncEvents{queue: make(chan asyncEvent, size), log: log}
	go func() {
		for ev := range e.queue {
			inner.Event(ev.ro, ev.eventType, ev.reason, ev.text)
		}
	}()
	return e
}

// Event implements EventRecorder without waiting for the request.
func (e *AsyncEvents) Event(ro *v1alpha1.Rollout, eventType, reason, message string) {
	select {
	case e.queue <- asyncEvent{ro.DeepCopy(), eventType, reason, message}:
	default:
		e.mu.Lock()
		e.dropped++
		n := e.dropped
		e.mu.Unlock()
		if e.log != nil {
			e.log.WithFields(logrus.Fields{"rollout": ro.Name, "namespace": ro.Namespace, "dropped": n}).Warn("event queue full: event dropped")
		}
	}
}

// Dropped counts the events dropped so far.
func (e *AsyncEvents) Dropped() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.dropped
}
