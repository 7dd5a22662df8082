package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/metalheal/metalheal/internal/template"
)

// sighting is one remediation request as the bench's watch saw it, with the local time of each event.
type sighting struct {
	Namespace, Name, Node string
	// Seen is when the ADDED event arrived.
	Seen time.Time
	// Created is the request's creationTimestamp (whole seconds).
	Created time.Time
	// Phase is the last status.phase seen (PowerCycleRemediation); Terminal when it first was Succeeded or
	// Failed.
	Phase    string
	Terminal time.Time
	// Gone is when the DELETED event arrived.
	Gone time.Time
}

// watcher records the remediation requests of one kind, in every namespace.
type watcher struct {
	mu     sync.Mutex
	byUID  map[types.UID]*sighting
	onSeen func(s sighting) // called for each new request, outside the lock
	pid    int              // the request watcher's process
	proc   *os.Process
	done   chan struct{} // closed once the watcher's output has ended and the process is reaped
	// stopping is set by stop: the output's end is then expected, not news.
	stopping atomic.Bool
}

// stop ends the request watcher's process and waits for it: a process of its own does not end with
// the bench.
func (w *watcher) stop() {
	w.stopping.Store(true)
	_ = w.proc.Kill()
	<-w.done
}

// watchRemediations starts the request watcher (see runRequestWatcher) on gvr and returns once its
// informer has synced. Requests that exist before it starts are recorded with a zero Seen.
//
// The watch runs in a process of its own, started from the bench's own executable: in the bench's
// process it would queue, at every event, behind the goroutines of thousands of simulated kubelets and
// their garbage, and the delays it measures would be the bench's. A process that sleeps between events
// is run as soon as one arrives, and stamps it then.
func watchRemediations(ctx context.Context, kubeconfig string, gvr schema.GroupVersionResource, onSeen func(sighting)) (*watcher, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("starting the request watcher: %w", err)
	}
	cmd := exec.CommandContext(ctx, self, watcherCommand, kubeconfig, gvr.Group+"/"+gvr.Version+"/"+gvr.Resource)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("starting the request watcher: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the request watcher: %w", err)
	}
	w := &watcher{byUID: map[types.UID]*sighting{}, onSeen: onSeen, pid: cmd.Process.Pid, proc: cmd.Process, done: make(chan struct{})}
	synced := make(chan error, 1)
	go func() {
		defer close(w.done)
		dec := json.NewDecoder(out)
		running := false // synced, and the bench waits on what it sees
		for {
			var e watchEvent
			if err := dec.Decode(&e); err != nil {
				err = fmt.Errorf("the request watcher stopped: %w (%v)", err, cmd.Wait())
				if !running {
					synced <- err
				} else if ctx.Err() == nil && !w.stopping.Load() {
					// The bench would wait for requests it can no longer see, until its phase times out.
					logf("%v: remediation requests are no longer seen", err)
				}
				return
			}
			switch e.Type {
			case "synced":
				running = true
				synced <- nil
			case "deleted":
				w.gone(e)
			default:
				w.observe(e)
			}
		}
	}()
	select {
	case err := <-synced:
		if err != nil {
			return nil, err
		}
		return w, nil
	case <-ctx.Done():
		w.stop()
		return nil, fmt.Errorf("watching %s: %w", gvr, context.Cause(ctx))
	}
}

// watcherCommand is the first argument that makes the bench's executable the request watcher.
const watcherCommand = "watch-requests"

// watchEvent is one line of the request watcher's output: an event, stamped when it arrived.
type watchEvent struct {
	Type      string      `json:"type"` // added, updated, deleted; "synced" once the informer has synced
	Initial   bool        `json:"initial,omitempty"`
	At        time.Time   `json:"at"`
	UID       types.UID   `json:"uid,omitempty"`
	Namespace string      `json:"namespace,omitempty"`
	Name      string      `json:"name,omitempty"`
	Node      string      `json:"node,omitempty"`
	Phase     string      `json:"phase,omitempty"`
	Created   metav1.Time `json:"created"`
}

// runRequestWatcher is the request watcher's process: it watches the requests of one resource
// ("group/version/resource") with the kubeconfig given, and writes each event to stdout as one JSON line,
// stamped as it arrives.
func runRequestWatcher(ctx context.Context, args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("usage: %s KUBECONFIG GROUP/VERSION/RESOURCE", watcherCommand)
	}
	parts := strings.Split(args[1], "/")
	if len(parts) != 3 {
		return fmt.Errorf("resource %q is not group/version/resource", args[1])
	}
	gvr := schema.GroupVersionResource{Group: parts[0], Version: parts[1], Resource: parts[2]}
	cfg, err := clientcmd.BuildConfigFromFlags("", args[0])
	if err != nil {
		return err
	}
	cfg.UserAgent = "metalheal-bench-watch"
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var mu sync.Mutex // one line at a time
	enc := json.NewEncoder(os.Stdout)
	emit := func(typ string, obj any, at time.Time, initial bool) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return
		}
		e := watchEvent{Type: typ, Initial: initial, At: at, UID: u.GetUID(), Namespace: u.GetNamespace(), Name: u.GetName(),
			Node: u.GetAnnotations()[template.AnnotationNodeName], Created: u.GetCreationTimestamp()}
		e.Phase, _, _ = unstructured.NestedString(u.Object, "status", "phase")
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(e)
	}
	factory := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	inf := factory.ForResource(gvr).Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    func(obj any, initial bool) { emit("added", obj, time.Now(), initial) },
		UpdateFunc: func(_, obj any) { emit("updated", obj, time.Now(), false) },
		DeleteFunc: func(obj any) { emit("deleted", obj, time.Now(), false) },
	}); err != nil {
		return fmt.Errorf("watching %s: %w", gvr, err)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("watching %s: %w", gvr, context.Cause(ctx))
	}
	mu.Lock()
	err = enc.Encode(watchEvent{Type: "synced", At: time.Now()})
	mu.Unlock()
	if err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

func (w *watcher) gone(e watchEvent) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if s, ok := w.byUID[e.UID]; ok && s.Gone.IsZero() {
		s.Gone = e.At
	}
}

func (w *watcher) observe(e watchEvent) {
	now := e.At
	if e.Initial {
		now = time.Time{}
	}
	w.mu.Lock()
	s, known := w.byUID[e.UID]
	if !known {
		node := e.Node
		if node == "" {
			node = e.Name
		}
		s = &sighting{Namespace: e.Namespace, Name: e.Name, Node: node, Seen: now, Created: e.Created.Time}
		w.byUID[e.UID] = s
	}
	s.Phase = e.Phase
	if (e.Phase == "Succeeded" || e.Phase == "Failed") && s.Terminal.IsZero() {
		s.Terminal = now
	}
	copied := *s
	w.mu.Unlock()
	if !known && e.Type == "added" && w.onSeen != nil && !now.IsZero() {
		w.onSeen(copied)
	}
}

// since returns, per node, the first request seen at or after t.
func (w *watcher) since(t time.Time) map[string]sighting {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]sighting{}
	for _, s := range w.byUID {
		if s.Seen.Before(t) {
			continue
		}
		if prev, ok := out[s.Node]; !ok || s.Seen.Before(prev.Seen) {
			out[s.Node] = *s
		}
	}
	return out
}

// present reports the nodes that have a request that exists now.
func (w *watcher) present() map[string]bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]bool{}
	for _, s := range w.byUID {
		if s.Gone.IsZero() {
			out[s.Node] = true
		}
	}
	return out
}
