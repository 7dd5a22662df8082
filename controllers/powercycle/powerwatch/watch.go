package powerwatch

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/bmcaccess"
	"github.com/metalheal/metalheal/pkg/bmc"
)

// streamResetAfter is how long a stream must have stayed open for its next reopening to start again at
// the first backoff step: a stream that drops at once keeps backing off.
const streamResetAfter = time.Minute

// UnsupportedRecheck is how long a watch polls a BMC that offers no event stream before it asks again: a
// BMC whose EventService was switched off (or that gains one with new firmware) gets its stream back
// without a restart. Asking costs a Redfish BMC two requests; an IPMI or Ironic driver, nothing.
const UnsupportedRecheck = 10 * time.Minute

// watch follows one host's power. Everything but the stream itself runs in one goroutine (run), so its
// fields need no lock.
type watch struct {
	w    *Watcher
	key  types.NamespacedName
	spec v1alpha1.PowerWatch

	// warned is the warning given in the current episode of Off readings (actContradicted or
	// actUnverifiable), so that it is given once; a reading of On, or a fence, ends the episode.
	warned action
	// written is the PoweredOff condition this watch last wrote (nil before its first write): the cache may
	// not show it yet when the next reading comes (a burst of stream events reads the power twice within
	// milliseconds), and writing it again would move its lastTransitionTime and repeat its event.
	written    *corev1.NodeCondition
	writtenUID types.UID // the Node written to: a Node deleted and made again starts without the condition
	// recovering is set while the BMC reads On but the host is not back (see actAwaitKubelet): the watch
	// polls then, stream or not, to see the kubelet's report.
	recovering bool
}

// poweredOff is the Node's PoweredOff condition as this watch knows it: its own last write, or the
// cached Node's.
func (wt *watch) poweredOff(node *corev1.Node) *corev1.NodeCondition {
	cond := poweredOff(node)
	if wt.written == nil || wt.writtenUID != node.UID || (cond != nil && cond.Status == wt.written.Status) {
		return cond
	}
	return wt.written
}

func newWatch(w *Watcher, key types.NamespacedName, spec v1alpha1.PowerWatch) *watch {
	return &watch{w: w, key: key, spec: spec}
}

// stream is one open event stream: its end arrives on ended.
type stream struct {
	cancel context.CancelFunc
	opened time.Time
}

// run reads the power once, then follows the event stream (when the BMC offers one and the spec allows
// it) and polls while no stream is open (and once more after one opened, and while a host that came back
// on has not reported Ready yet), until ctx ends. A stream that fails or drops is opened again after a
// backoff (StreamBackoff doubling to StreamBackoffMax); ErrUnsupported means the BMC has none: the watch
// polls, and asks again after UnsupportedRecheck.
func (wt *watch) run(ctx context.Context) {
	log := ctrl.LoggerFrom(ctx)
	clk := wt.w.opts.Clock
	changed := make(chan struct{}, 1)
	ended := make(chan error, 1)
	var open *stream
	// settle keeps the poll going for one more tick after a stream opened: WatchPower cannot say when the
	// BMC has taken the subscription, and a change before that is on no stream.
	settle := false
	delay := wt.w.opts.StreamBackoff
	var reopen clock.Timer
	poll := clk.NewTimer(wt.spec.PollInterval())
	defer func() {
		poll.Stop()
		if reopen != nil {
			reopen.Stop()
		}
		if open != nil {
			open.cancel()
			<-ended // WatchPower returns once its ctx ends
		}
	}()

	startStream := func() {
		d, err := wt.driver(ctx)
		if err != nil {
			ended <- err
			return
		}
		sctx, cancel := context.WithCancel(ctx)
		open, settle = &stream{cancel: cancel, opened: clk.Now()}, true
		Streams.Inc()
		wt.w.goroutines.Add(1)
		go func() {
			defer wt.w.goroutines.Add(-1)
			defer Streams.Dec()
			ended <- bmc.WatchPower(sctx, d, func() {
				select {
				case changed <- struct{}{}:
				default: // a reading is due already
				}
			})
		}()
	}

	wt.look(ctx, triggerPoll)
	if wt.spec.StreamEnabled() {
		startStream()
	}
	for {
		var pollC, reopenC <-chan time.Time
		if open == nil || settle || wt.recovering {
			pollC = poll.C()
		}
		if reopen != nil {
			reopenC = reopen.C()
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
			wt.look(ctx, triggerStream)
		case <-pollC:
			settle = false
			wt.look(ctx, triggerPoll)
			poll.Reset(wt.spec.PollInterval())
		case <-reopenC:
			reopen = nil
			startStream()
		case err := <-ended:
			if ctx.Err() != nil {
				open = nil
				return
			}
			lasted := time.Duration(0)
			if open != nil {
				open.cancel()
				lasted = clk.Since(open.opened)
				open = nil
			}
			if errors.Is(err, bmc.ErrUnsupported) {
				log.V(2).Info("The BMC offers no event stream: polling its power", "pollInterval", wt.spec.PollInterval(),
					"askAgainIn", UnsupportedRecheck, "reason", err.Error())
				reopen = clk.NewTimer(UnsupportedRecheck)
			} else {
				if lasted >= streamResetAfter {
					delay = wt.w.opts.StreamBackoff
				}
				if err == nil {
					err = errors.New("the stream ended")
				}
				log.V(1).Info("The BMC's event stream is not open: polling meanwhile", "reopenIn", delay, "reason", err.Error())
				reopen = clk.NewTimer(delay)
				delay = min(2*delay, wt.w.opts.StreamBackoffMax)
			}
			// A change may have come while no stream was open: read now, and poll from here on.
			wt.look(ctx, triggerPoll)
			poll.Reset(wt.spec.PollInterval())
		}
	}
}

// driver returns the BMC's current driver (rebuilt by the Access when its spec or Secret changed).
func (wt *watch) driver(ctx context.Context) (bmc.Driver, error) {
	b, err := wt.bmc(ctx)
	if err != nil {
		return nil, err
	}
	return wt.w.opts.Access.ForBMC(ctx, b)
}

func (wt *watch) bmc(ctx context.Context) (*v1alpha1.BMC, error) {
	b := &v1alpha1.BMC{}
	if err := wt.w.opts.Client.Get(ctx, wt.key, b); err != nil {
		return nil, fmt.Errorf("reading BMC %s: %w", wt.key, err)
	}
	return b, nil
}

// read reads the host's power state, bounded by ReadTimeout.
func (wt *watch) read(ctx context.Context, d bmc.Driver, how trigger) (bmc.PowerState, error) {
	rctx, cancel := context.WithTimeout(ctx, wt.w.opts.ReadTimeout)
	defer cancel()
	state, err := d.PowerState(rctx)
	Readings.WithLabelValues(string(how), readingResult(state, err)).Inc()
	return state, err
}

// look reads the power and acts on what it reads (see the package doc). Trouble (a BMC that does not
// answer, a Node that cannot be read) changes nothing: the next event or poll looks again.
func (wt *watch) look(ctx context.Context, how trigger) {
	log := ctrl.LoggerFrom(ctx)
	b, err := wt.bmc(ctx)
	if err != nil {
		log.V(2).Info("Power not read", "reason", err.Error())
		return
	}
	d, err := wt.w.opts.Access.ForBMC(ctx, b)
	if err != nil {
		log.V(2).Info("Power not read: no driver", "reason", err.Error())
		return
	}
	seen := wt.w.opts.Clock.Now()
	state, err := wt.read(ctx, d, how)
	if err != nil {
		log.V(2).Info("Power not read", "trigger", how, "reason", err.Error())
		return
	}
	log.V(4).Info("Power read", "trigger", how, "state", state)
	switch state {
	case bmc.PowerStateOn:
		wt.warned = actNone
		wt.on(ctx, b, seen, how)
	case bmc.PowerStateOff:
		wt.recovering = false
		wt.off(ctx, b, d, seen, how)
	}
}

// on sets PoweredOff=False on a Node where it is True.
func (wt *watch) on(ctx context.Context, b *v1alpha1.BMC, seen time.Time, how trigger) {
	ns, node, ok := wt.node(ctx, b)
	if !ok {
		return
	}
	ready := readyCondition(node)
	switch decideOn(wt.poweredOff(node), ready) {
	case actAwaitKubelet:
		wt.recovering = true
		ctrl.LoggerFrom(ctx).V(4).Info("Powered on, the kubelet not back yet: PoweredOff stays True")
		return
	case actPoweredOn:
	default:
		wt.recovering = false
		return
	}
	wt.recovering = false
	cond := poweredOnCondition(wt.w.opts.Clock.Now(), seen, ready.LastHeartbeatTime.Time, how, klogName(b))
	if err := ns.setCondition(ctx, node.Name, cond); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Writing the Node's power condition failed", "node", node.Name)
		return
	}
	wt.written, wt.writtenUID = &cond, node.UID
	wt.decided(ctx, b, actPoweredOn, corev1.EventTypeNormal, EventHostPoweredOn, cond.Message)
}

// off acts on an Off reading: a remediation's own power-off is no news; otherwise the BMC is read again,
// the kubelet probed, and only when both agree is PoweredOff set True.
func (wt *watch) off(ctx context.Context, b *v1alpha1.BMC, d bmc.Driver, seen time.Time, how trigger) {
	log := ctrl.LoggerFrom(ctx)
	host := bmcaccess.HostOf(b)
	if r := wt.w.opts.Remediations; r != nil && r.Remediating(ctx, host.String()) {
		Decisions.WithLabelValues(string(actRemediating)).Inc()
		log.V(4).Info("Power off during a remediation of the host: left to the remediator")
		return
	}
	ns, node, ok := wt.node(ctx, b)
	if !ok || alreadyOff(wt.poweredOff(node)) {
		return
	}
	// The BMC's own confirmation: a second reading, as the remediator confirms a power-off.
	if again, err := wt.read(ctx, d, how); err != nil || again != bmc.PowerStateOff {
		log.V(2).Info("The BMC did not read the host off again: nothing done", "state", again, "error", err)
		return
	}
	// The independent reading: the host's kubelet.
	kubeletState, endpoint, probeErr := wt.probe(ctx, node)
	act := decideOff(kubeletState, wt.warned)
	switch act {
	case actNone:
		return
	case actContradicted:
		wt.warned = act
		wt.decided(ctx, b, act, corev1.EventTypeWarning, EventPowerReadingContradicted, fmt.Sprintf(
			"The BMC reported host %s powered off (%s) but its kubelet at %s answers: the host runs, nothing was fenced. Check the BMC (is the address that of this host's BMC?)",
			host, how.describe(), endpoint))
	case actUnverifiable:
		wt.warned = act
		wt.decided(ctx, b, act, corev1.EventTypeWarning, EventPowerReadingUnverifiable, fmt.Sprintf(
			"The BMC reported host %s powered off (%s) but Node %s publishes no kubelet endpoint (InternalIP and kubelet port) to check that against: nothing was fenced",
			host, how.describe(), node.Name))
	case actPoweredOff:
		cond := poweredOffCondition(wt.w.opts.Clock.Now(), seen, how, klogName(b), endpoint, wt.w.opts.ProbeTimeout, probeErr)
		if err := ns.setCondition(ctx, node.Name, cond); err != nil {
			log.Error(err, "Writing the Node's power condition failed", "node", node.Name)
			return
		}
		wt.written, wt.writtenUID, wt.warned = &cond, node.UID, actNone
		wt.decided(ctx, b, act, corev1.EventTypeNormal, EventHostPoweredOff, cond.Message)
	}
}

// probe is the second reading: a connection to the Node's kubelet, bounded by ProbeTimeout.
func (wt *watch) probe(ctx context.Context, node *corev1.Node) (kubelet, string, error) {
	endpoint := kubeletEndpoint(node)
	if endpoint == "" {
		return kubeletNoEndpoint, "", nil
	}
	pctx, cancel := context.WithTimeout(ctx, wt.w.opts.ProbeTimeout)
	defer cancel()
	if err := wt.w.opts.Probe(pctx, endpoint); err != nil {
		return kubeletSilent, endpoint, err
	}
	return kubeletAnswered, endpoint, nil
}

// node reads the host's Node and says where to write it; ok is false (logged) when it cannot be read or
// does not exist.
func (wt *watch) node(ctx context.Context, b *v1alpha1.BMC) (nodes, *corev1.Node, bool) {
	log := ctrl.LoggerFrom(ctx)
	ns, err := wt.w.nodesOf(ctx, b)
	if err != nil {
		log.V(2).Info("The host's Node cannot be reached", "reason", err.Error())
		return nodes{}, nil, false
	}
	node, err := ns.node(ctx, b.Spec.NodeName)
	if err != nil || node == nil {
		log.V(2).Info("The host's Node cannot be read", "node", b.Spec.NodeName, "error", err)
		return nodes{}, nil, false
	}
	return ns, node, true
}

// decided counts, logs and reports one decision: the one place a decision is announced.
func (wt *watch) decided(ctx context.Context, b *v1alpha1.BMC, act action, eventType, reason, note string) {
	Decisions.WithLabelValues(string(act)).Inc()
	ctrl.LoggerFrom(ctx).Info("Acted on a power reading", "decision", act, "node", b.Spec.NodeName, "note", note)
	wt.w.opts.Recorder.Eventf(b, nil, eventType, reason, ActionWatchPower, "%s", note)
}

func klogName(b *v1alpha1.BMC) string { return b.Namespace + "/" + b.Name }
