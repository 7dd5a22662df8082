package testenv

import (
	"fmt"
	"reflect"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// Event is one event a Recorder saw.
type Event struct {
	// Kind and Name are the regarding object's; Related is the related object's name ("" if none).
	Kind, Name, Related        string
	Type, Reason, Action, Note string
}

// Recorder is a k8s.io/client-go/tools/events.EventRecorder that keeps every event for assertions.
type Recorder struct {
	scheme *runtime.Scheme
	mu     sync.Mutex
	events []Event
}

// NewRecorder records events; scheme names the kinds of typed objects.
func NewRecorder(scheme *runtime.Scheme) *Recorder { return &Recorder{scheme: scheme} }

// Eventf records an event.
func (r *Recorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	e := Event{Kind: r.kind(regarding), Name: name(regarding), Related: name(related), Type: eventtype, Reason: reason,
		Action: action, Note: fmt.Sprintf(note, args...)}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

// All returns the events so far, in order.
func (r *Recorder) All() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// With returns the events with the given reason, in order.
func (r *Recorder) With(reason string) []Event {
	var out []Event
	for _, e := range r.All() {
		if e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}

func (r *Recorder) kind(o runtime.Object) string {
	if o == nil {
		return ""
	}
	if k := o.GetObjectKind().GroupVersionKind().Kind; k != "" {
		return k
	}
	if gvk, err := apiutil.GVKForObject(o, r.scheme); err == nil {
		return gvk.Kind
	}
	return fmt.Sprintf("%T", o)
}

func name(o runtime.Object) string {
	if o == nil || reflect.ValueOf(o).Kind() == reflect.Pointer && reflect.ValueOf(o).IsNil() {
		return ""
	}
	m, err := meta.Accessor(o)
	if err != nil {
		return ""
	}
	return m.GetName()
}
