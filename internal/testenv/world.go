package testenv

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

// WorldOptions shape a World.
type WorldOptions struct {
	// Namespace, if set, is created for the world with this exact name.
	Namespace string
	// GenerateNamespace, if set (and Namespace is not), is the prefix of a namespace the API server
	// names for the world.
	GenerateNamespace string
	// Start is the fake clock's time at first. When zero it is a second after the world's namespace
	// was created: the API server's time, close to the creation timestamps of the test's objects.
	Start time.Time
}

// World is one test's corner of an Env: a namespace of its own (if asked for), a fake clock to inject
// into the reconcilers, and a recorder of the events they emit. The API server runs no garbage
// collector and no namespace controller: a test removes what it leaves behind that could disturb
// another (cluster-scoped objects above all), or makes it unique to its world.
type World struct {
	Env       *Env
	Namespace string
	Clock     *clocktesting.FakeClock
	Events    *Recorder
}

// NewWorld makes a World in e for the test t.
func (e *Env) NewWorld(ctx context.Context, t TB, opts WorldOptions) *World {
	t.Helper()
	w := &World{Env: e, Events: NewRecorder(e.Scheme)}
	start := opts.Start
	if opts.Namespace != "" || opts.GenerateNamespace != "" {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: opts.Namespace}}
		if opts.Namespace == "" {
			ns.GenerateName = opts.GenerateNamespace
		}
		if err := e.Client.Create(ctx, ns); err != nil {
			t.Fatalf("creating the world's namespace: %v", err)
		}
		w.Namespace = ns.Name
		if start.IsZero() {
			start = ns.CreationTimestamp.Add(time.Second)
		}
	}
	if start.IsZero() {
		t.Fatalf("a world without a namespace needs WorldOptions.Start")
	}
	w.Clock = clocktesting.NewFakeClock(start)
	return w
}
