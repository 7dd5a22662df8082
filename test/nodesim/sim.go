package nodesim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// ErrNotStarted is returned by AddNodes before Start.
var ErrNotStarted = errors.New("simulator not started")

// ErrStopped is returned by AddNodes once the simulator has stopped.
var ErrStopped = errors.New("simulator stopped")

// schedulingSlack lets the scheduler take work due this soon with what is due now, so a fleet of
// thousands wakes it in batches rather than once per heartbeat.
const schedulingSlack = 10 * time.Millisecond

// Simulator keeps simulated Nodes alive as their kubelets would, for the hosts that have power and no
// fault. Its methods may be called from any goroutine.
type Simulator struct {
	client kubernetes.Interface
	opts   Options
	clock  clock.WithTicker
	log    logr.Logger

	mu    sync.Mutex
	fleet *fleet

	// Work that is due waits in two FIFOs, guarded by mu, each with workers of its own: heartbeats and
	// boots. Registering thousands of nodes never delays the lease renewals of those already up, and a
	// host that boots registers without waiting behind the fleet's heartbeats, as a real kubelet, its own
	// process, does.
	beats, boots         []task
	beatReady, bootReady *sync.Cond    // signalled when work is added to beats, boots
	wake                 chan struct{} // a buffered poke for the scheduler: the queue changed

	started atomic.Bool
	done    chan struct{}
	pods    *podKubelet

	stats  counters
	podIPs atomic.Int64 // pod IPs handed out
	leases leaseMemory  // each node's lease as last written, for the next renewal
	ports  kubeletPorts // the kubelets' TCP ports (Options.KubeletPorts)
}

// counters are the simulator's statistics.
type counters struct {
	boots, leases, statuses, podsStarted, podsDeleted, errors atomic.Int64
	maxLeaseDelay                                             atomic.Int64 // nanoseconds
}

// New makes a simulator that talks to the API server through client (see NewClient). It subscribes to
// opts.Power at once. Start it, then add nodes.
func New(client kubernetes.Interface, opts Options) *Simulator {
	opts = opts.withDefaults()
	s := &Simulator{
		client: client,
		opts:   opts,
		clock:  opts.Clock,
		log:    logr.Discard(),
		wake:   make(chan struct{}, 1),
		done:   make(chan struct{}),
	}
	s.beatReady, s.bootReady = sync.NewCond(&s.mu), sync.NewCond(&s.mu)
	s.fleet = newFleet(timing{
		bootDelay:      opts.BootDelay,
		leaseInterval:  opts.LeaseInterval,
		statusInterval: opts.StatusInterval,
		retryInterval:  opts.RetryInterval,
	}, jitter)
	opts.Power.Subscribe(func(node string, on bool) { _ = s.SetPower(node, on) })
	return s
}

// jitter returns a duration in (0, max].
func jitter(max time.Duration) time.Duration {
	if max <= 0 {
		return 0
	}
	return max - rand.N(max)
}

// Start starts the simulator's goroutines (a scheduler, Options.Workers API workers for heartbeats and as
// many for boots, and the informers that let it act as a kubelet on its Nodes and Pods) and returns once
// the informers have synced. It runs until ctx is done; Done is closed when it has stopped. The logger
// comes from ctx (logr).
func (s *Simulator) Start(ctx context.Context) (err error) {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("simulator started twice")
	}
	defer func() {
		if err != nil {
			close(s.done) // a simulator that failed to start is a stopped one
		}
	}()
	s.log = logr.FromContextOrDiscard(ctx).WithName("nodesim").WithValues("simulator", s.opts.Name)

	factory := informers.NewSharedInformerFactory(s.client, 0)
	nodes := factory.Core().V1().Nodes().Informer()
	if err := nodes.SetTransform(slimNode); err != nil {
		return fmt.Errorf("node informer: %w", err)
	}
	if _, err := nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    s.onNode,
		UpdateFunc: func(_, obj any) { s.onNode(obj) },
	}); err != nil {
		return fmt.Errorf("node informer: %w", err)
	}
	pods, err := newPodKubelet(s)
	if err != nil {
		return err
	}
	s.pods = pods

	factory.Start(ctx.Done())
	pods.factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), nodes.HasSynced, pods.informer.HasSynced) {
		return fmt.Errorf("waiting for the informers: %w", context.Cause(ctx))
	}

	var wg sync.WaitGroup
	go func() {
		// Wake the idle workers to see that ctx is done.
		<-ctx.Done()
		s.mu.Lock()
		s.beatReady.Broadcast()
		s.bootReady.Broadcast()
		s.mu.Unlock()
	}()
	for range s.opts.Workers {
		wg.Go(func() { s.worker(ctx, &s.beats, s.beatReady) })
		wg.Go(func() { s.worker(ctx, &s.boots, s.bootReady) })
	}
	wg.Go(func() { pods.run(ctx) })
	wg.Go(func() { s.schedule(ctx) })
	go func() {
		wg.Wait()
		s.ports.closeAll()
		factory.Shutdown()
		pods.factory.Shutdown()
		close(s.done)
	}()
	return nil
}

// Done is closed once a started simulator has stopped.
func (s *Simulator) Done() <-chan struct{} { return s.done }

// AddNodes starts simulating nodes and returns when every one whose host has power has booted: its Node
// is registered (or taken over, if it exists) with Ready=True, and its lease renewed. A node whose host is
// off is registered when it first boots. The Nodes are created with Options.Workers calls at once.
func (s *Simulator) AddNodes(ctx context.Context, specs ...NodeSpec) error {
	if !s.started.Load() {
		return ErrNotStarted
	}
	select {
	case <-s.done:
		return ErrStopped
	default:
	}
	var waits []*host
	s.mu.Lock()
	for i := range specs {
		spec := specs[i]
		on, err := s.opts.Power.PoweredOn(spec.Name)
		if err != nil {
			s.mu.Unlock()
			return err
		}
		if s.opts.KubeletPorts {
			if err := s.ports.add(spec.Name, on); err != nil {
				s.mu.Unlock()
				return err
			}
		}
		h, err := s.fleet.add(&spec, on)
		if err != nil {
			s.mu.Unlock()
			return err
		}
		if on {
			waits = append(waits, h)
		}
	}
	s.mu.Unlock()
	s.poke()

	for _, h := range waits {
		select {
		case <-h.up:
		case <-s.done:
			return fmt.Errorf("waiting for node %q to boot: %w", h.spec.Name, ErrStopped)
		case <-ctx.Done():
			s.mu.Lock()
			err := h.lastErr
			s.mu.Unlock()
			return fmt.Errorf("waiting for node %q to boot (last error: %v): %w", h.spec.Name, err, context.Cause(ctx))
		}
	}
	return nil
}

// Remove stops simulating nodes and deletes their Nodes and Leases.
func (s *Simulator) Remove(ctx context.Context, names ...string) error {
	s.mu.Lock()
	for _, name := range names {
		s.fleet.remove(name)
		s.ports.remove(name)
	}
	s.mu.Unlock()
	for _, name := range names {
		err := s.client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting node %q: %w", name, err)
		}
		err = s.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting the lease of node %q: %w", name, err)
		}
	}
	return nil
}

// RemoveAll stops simulating every node and deletes the Nodes and Leases this simulator created (those
// labelled SimulatorLabel=Options.Name), two requests in all.
func (s *Simulator) RemoveAll(ctx context.Context) error {
	s.mu.Lock()
	for name := range s.fleet.hosts {
		s.fleet.remove(name)
		s.ports.remove(name)
	}
	s.mu.Unlock()
	sel := metav1.ListOptions{LabelSelector: SimulatorLabel + "=" + s.opts.Name}
	if err := s.client.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, sel); err != nil {
		return fmt.Errorf("deleting the simulated nodes: %w", err)
	}
	if err := s.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).DeleteCollection(ctx, metav1.DeleteOptions{}, sel); err != nil {
		return fmt.Errorf("deleting the simulated nodes' leases: %w", err)
	}
	return nil
}

// SetPower tells the simulator that a node's host gained or lost power (a PowerSource calls it; tests
// may too). Losing power stops the heartbeats at once, and closes the kubelet's port (Options.KubeletPorts);
// gaining it opens the port again and boots the host after the boot delay.
func (s *Simulator) SetPower(node string, on bool) error {
	s.mu.Lock()
	ok := s.fleet.setPower(node, on)
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("%q: %w", node, ErrUnknownNode)
	}
	if err := s.ports.setPower(node, on); err != nil {
		s.log.Error(err, "Kubelet port not reopened", "node", node)
	}
	s.poke()
	return nil
}

// InjectFault gives a node's host a fault (see Fault); FaultNone clears it.
func (s *Simulator) InjectFault(node string, f Fault) error {
	s.mu.Lock()
	err := s.fleet.inject(node, f)
	s.mu.Unlock()
	s.poke()
	return err
}

// ClearFault heals a node's host: a hung kubelet resumes at once, a broken host boots (after the boot
// delay) if it has power.
func (s *Simulator) ClearFault(node string) error {
	return s.InjectFault(node, FaultNone)
}

// State reports what a node's host is doing.
func (s *Simulator) State(node string) (State, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.fleet.hosts[node]
	if !ok {
		return "", fmt.Errorf("%q: %w", node, ErrUnknownNode)
	}
	return h.state, nil
}

// Nodes lists the simulated nodes, sorted.
func (s *Simulator) Nodes() []string {
	s.mu.Lock()
	names := make([]string, 0, len(s.fleet.hosts))
	for name := range s.fleet.hosts {
		names = append(names, name)
	}
	s.mu.Unlock()
	slices.Sort(names)
	return names
}

// Stats are counts of what a simulator has done since it was made.
type Stats struct {
	// Nodes is how many nodes are simulated; States counts them by state.
	Nodes  int
	States map[State]int
	// Boots, LeaseRenewals and StatusPosts count successful kubelet actions.
	Boots, LeaseRenewals, StatusPosts int64
	// PodsStarted and PodsDeleted count pods the simulated kubelets marked Running or finished deleting.
	PodsStarted, PodsDeleted int64
	// Errors counts failed API calls (each is retried).
	Errors int64
	// MaxLeaseDelay is the longest time from a lease renewal being due to the API server having it: how
	// far behind the simulator fell (a few milliseconds when it keeps up), since the start or the last
	// TakeMaxLeaseDelay.
	MaxLeaseDelay time.Duration
}

// TakeMaxLeaseDelay returns the longest lease renewal delay (see Stats.MaxLeaseDelay) since the previous
// call, or since the start, and starts over: how far behind the simulator fell in a stretch of time.
func (s *Simulator) TakeMaxLeaseDelay() time.Duration {
	return time.Duration(s.stats.maxLeaseDelay.Swap(0))
}

// Stats returns the simulator's statistics.
func (s *Simulator) Stats() Stats {
	st := Stats{
		States:        map[State]int{},
		Boots:         s.stats.boots.Load(),
		LeaseRenewals: s.stats.leases.Load(),
		StatusPosts:   s.stats.statuses.Load(),
		PodsStarted:   s.stats.podsStarted.Load(),
		PodsDeleted:   s.stats.podsDeleted.Load(),
		Errors:        s.stats.errors.Load(),
		MaxLeaseDelay: time.Duration(s.stats.maxLeaseDelay.Load()),
	}
	s.mu.Lock()
	st.Nodes = len(s.fleet.hosts)
	for _, h := range s.fleet.hosts {
		st.States[h.state]++
	}
	s.mu.Unlock()
	return st
}

// poke wakes the scheduler.
func (s *Simulator) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// schedule hands the work that is due to the workers, and sleeps until more is. It never waits for the
// workers.
func (s *Simulator) schedule(ctx context.Context) {
	for {
		now := s.clock.Now()
		s.mu.Lock()
		s.fleet.schedule(now)
		tasks := s.fleet.pop(now.Add(schedulingSlack))
		var beats, boots int
		for _, t := range tasks {
			if t.kind == taskBoot {
				s.boots = append(s.boots, t)
				boots++
			} else {
				s.beats = append(s.beats, t)
				beats++
			}
		}
		next, pending := s.fleet.next()
		s.mu.Unlock()
		signal(s.beatReady, beats)
		signal(s.bootReady, boots)

		var timeout <-chan time.Time
		var timer clock.Timer
		if pending {
			timer = s.clock.NewTimer(max(next.Sub(now), 0))
			timeout = timer.C()
		}
		select {
		case <-ctx.Done():
		case <-s.wake:
		case <-timeout:
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// signal wakes as many workers as there are new tasks (a broadcast for more than one).
func signal(c *sync.Cond, tasks int) {
	if tasks == 1 {
		c.Signal()
	} else if tasks > 1 {
		c.Broadcast()
	}
}

// worker does the kubelet work of one FIFO (beats or boots, signalled by ready) until ctx is done.
func (s *Simulator) worker(ctx context.Context, fifo *[]task, ready *sync.Cond) {
	for {
		t, ok := s.take(ctx, fifo, ready)
		if !ok {
			return
		}
		s.do(ctx, t)
	}
}

// take waits for work in fifo; false once ctx is done.
func (s *Simulator) take(ctx context.Context, fifo *[]task, ready *sync.Cond) (task, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if ctx.Err() != nil {
			return task{}, false
		}
		if len(*fifo) > 0 {
			t := (*fifo)[0]
			*fifo = (*fifo)[1:]
			return t, true
		}
		ready.Wait()
	}
}

// do performs one task and records its outcome.
func (s *Simulator) do(ctx context.Context, t task) {
	now := s.clock.Now()
	var err error
	var readyAt time.Time // a boot's Node stored Ready
	switch t.kind {
	case taskBoot:
		readyAt, err = s.boot(ctx, t, now)
	case taskLease:
		err = s.renewLease(ctx, t, now)
	case taskStatus:
		err = s.postStatus(ctx, t, now)
	}
	if ctx.Err() != nil {
		return
	}
	switch {
	case errors.Is(err, errNodeGone):
		s.log.V(1).Info("Node deleted: the kubelet stops until its host boots again", "node", t.node)
	case err != nil:
		s.stats.errors.Add(1)
		s.log.V(1).Info("Kubelet call failed, retrying", "node", t.node, "task", t.kind.String(), "error", err.Error())
	default:
		s.count(t)
	}
	s.mu.Lock()
	booted := s.fleet.done(t, now, err)
	s.mu.Unlock()
	s.poke()
	if booted {
		s.pods.nodeUp(t.node)
		if s.opts.OnBoot != nil {
			s.opts.OnBoot(t.node, readyAt)
		}
	}
}

// count records a successful task.
func (s *Simulator) count(t task) {
	switch t.kind {
	case taskBoot:
		s.stats.boots.Add(1)
	case taskLease:
		s.stats.leases.Add(1)
		delay := int64(s.clock.Since(t.due))
		for {
			old := s.stats.maxLeaseDelay.Load()
			if delay <= old || s.stats.maxLeaseDelay.CompareAndSwap(old, delay) {
				break
			}
		}
	case taskStatus:
		s.stats.statuses.Add(1)
	}
}

// heartbeating reports whether a node's kubelet is up (it runs the node's pods).
func (s *Simulator) heartbeating(node string) (ok bool, index int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.fleet.heartbeating(node) {
		return false, 0
	}
	return true, s.fleet.hosts[node].index
}

// simulated reports whether the simulator knows a node.
func (s *Simulator) simulated(node string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.fleet.hosts[node]
	return ok
}
