package controller

import (
	"fmt"
	"runtime/debug"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
)

// The Event sink of the leader's broadcaster, with its panics recovered: one bad Event must not
// stop the process. (A panic in a reconcile is recovered by the worker: safeReconcile.)

// safeSink is the Event broadcaster's sink with every call's panic recovered: the broadcaster
// runs the sink in a goroutine whose HandleCrash re-panics, which would end the process. A
// recovered call is logged and answered with a RequestConstructionError, which the broadcaster
// does not retry (the same Event would panic again).
type safeSink struct {
	sink record.EventSink
	log  logrus.FieldLogger
}

// guard recovers a panic of one sink call and answers it with an error.
func (s safeSink) guard(verb string, ev *corev1.Event, out **corev1.Event, err *error) {
	if r := recover(); r != nil {
		fields := logrus.Fields{"verb": verb, "panic": fmt.Sprint(r), "stack": string(debug.Stack())}
		if ev != nil {
			fields["event"] = ev.Reason
			fields["object"] = ev.InvolvedObject.Kind + " " + ev.InvolvedObject.Namespace + "/" + ev.InvolvedObject.Name
		}
		s.log.WithFields(fields).Error("writing an Event panicked; the Event is dropped")
		*out, *err = nil, &restclient.RequestConstructionError{Err: fmt.Errorf("event sink %s panicked: %v", verb, r)}
	}
}

func (s safeSink) Create(ev *corev1.Event) (out *corev1.Event, err error) {
	defer s.guard("create", ev, &out, &err)
	return s.sink.Create(ev)
}

func (s safeSink) Update(ev *corev1.Event) (out *corev1.Event, err error) {
	defer s.guard("update", ev, &out, &err)
	return s.sink.Update(ev)
}

func (s safeSink) Patch(ev *corev1.Event, data []byte) (out *corev1.Event, err error) {
	defer s.guard("patch", ev, &out, &err)
	return s.sink.Patch(ev, data)
}
