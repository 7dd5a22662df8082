package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/timeline"
	"github.com/metalheal/metalheal/pkg/leases"
	"github.com/metalheal/metalheal/test/harness"
	"github.com/metalheal/metalheal/test/nodesim"
	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
	"github.com/metalheal/metalheal/test/world"
)

// The demo's settings: config/samples with timeouts short enough for the story to take about half a
// minute.
const (
	// checkName names the NodeHealthCheck and the PowerCycleRemediationTemplate.
	checkName = "demo"
	// leaseNamespace is where the node leases live (the manager's default).
	leaseNamespace = "medik8s-leases"

	gracePeriod     = 8 * time.Second // node monitor grace period: silence before Ready=Unknown
	leaseInterval   = 2 * time.Second // the simulated kubelets' heartbeat
	unhealthyFor    = 5 * time.Second // the NodeHealthCheck's condition duration
	healthyDelay    = 3 * time.Second // how long the node must stay Ready before its request is deleted
	bootDelay       = 3 * time.Second // power-on to Ready
	bmcPowerDelay   = time.Second     // the simulated BMC's time per power transition
	powerPollPeriod = time.Second     // the remediator's --power-poll-interval
	powerOffTimeout = 10              // seconds: the BMC must confirm the power-off within this
	powerOnTimeout  = 30              // seconds: from power-on until the node is Ready

	// powerWatchPoll is the power watch's poll interval in the power-cut story (the API's least): the
	// BMC's power is read this often while no event stream is open.
	powerWatchPoll = 5 * time.Second

	// readyTimeout bounds the wait for the BMCs and the NodeHealthCheck before the failure.
	readyTimeout = time.Minute
	// cleanTimeout bounds the final check that nothing was left behind.
	cleanTimeout = 15 * time.Second
	// pollInterval is how often the demo looks while it waits on something it does not watch.
	pollInterval = 250 * time.Millisecond
)

// The stories the demo tells (--story).
const (
	// storyKubeletHang: a node's kubelet hangs while its host stays on; the node lifecycle controller
	// notices the silence, the NodeHealthCheck waits its duration, the host is power-cycled.
	storyKubeletHang = "kubelet-hang"
	// storyPowerCut: a host's power is cut; its BMC says so, and the host is fenced on the BMC's word while
	// its Node is still Ready (docs/bmc.md, Fence on the BMC's word).
	storyPowerCut = "power-cut"
)

// options are the command line's.
type options struct {
	// Story is which story to tell: storyKubeletHang (the default) or storyPowerCut.
	Story string
	// Workers is the number of hosts (and nodes). At least 2.
	Workers int
	// Keep leaves everything running until ctx is done, and prints how to look around.
	Keep bool
	// DropEventStream, in the power-cut story, switches the simulator's event service off before the cut:
	// the manager's streams drop and only its poll can tell of the cut.
	DropEventStream bool
	// Timeout bounds everything after the manager is built: the world's start, the story and the checks.
	Timeout time.Duration
	// Clock times the story.
	Clock clock.Clock
	// afterStory, when set (by tests), runs once the story has ended clean, while the world still runs.
	afterStory func(ctx context.Context, h *harness.Harness) error
}

func (o options) validate() error {
	switch o.Story {
	case "", storyKubeletHang, storyPowerCut:
	default:
		return fmt.Errorf("--story %q: must be %s or %s", o.Story, storyKubeletHang, storyPowerCut)
	}
	if o.DropEventStream && o.Story != storyPowerCut {
		return fmt.Errorf("--drop-event-stream belongs to --story=%s", storyPowerCut)
	}
	if o.Workers < 2 {
		return fmt.Errorf("--workers %d: the demo needs at least 2 (one to break, one to stay healthy)", o.Workers)
	}
	if o.Timeout <= 0 {
		return fmt.Errorf("--timeout %s: must be positive", o.Timeout)
	}
	return nil
}

// ErrNotClean is returned when the node came back but something was left behind.
var ErrNotClean = errors.New("not clean")

// ErrTimedOut is returned when the story does not end within the demo's timeout.
var ErrTimedOut = errors.New("timed out")

// ErrManagerExited is returned when the manager process dies during the demo.
var ErrManagerExited = errors.New("the manager exited")

// run tells the story: it builds the world, breaks a node and follows its remediation to the end. It
// returns nil once the node is back and everything is clean. With Keep it then waits for ctx to be done.
func run(ctx context.Context, opts options, out io.Writer) error {
	_, err := runStory(ctx, opts, out)
	return err
}

// runStory is run, also returning the story (for the test).
func runStory(ctx context.Context, opts options, out io.Writer) (_ *story, err error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	// The demo's watches log through controller-runtime; the story is what this program prints.
	ctrllog.SetLogger(logr.Discard())
	begun := opts.Clock.Now()
	say := func(format string, args ...any) { fmt.Fprintf(out, "==> "+format+"\n", args...) }
	fmt.Fprintf(out, "metalheal demo: a node dies, metalheal power-cycles its host through its BMC, the node comes back.\n\n")

	say("building the manager (bin/manager)")
	if _, err := harness.BuildManager(ctx); err != nil {
		return nil, err
	}
	storyCtx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()

	h, err := harness.Start(storyCtx, harness.Options{
		Workers: opts.Workers,
		World: world.Options{
			NodeMonitorGracePeriod: gracePeriod,
			KeepDir:                true, // removed below unless the demo fails
		},
		LeaseInterval: leaseInterval,
		BootDelay:     bootDelay,
		PowerDelay:    bmcPowerDelay,
		KubeletPorts:  opts.Story == storyPowerCut, // the power watch's second reading
		Log:           prefixWriter{out: out, prefix: "==> "},
	})
	if err != nil {
		return nil, fmt.Errorf("starting the local world: %w", err)
	}
	var m *harness.Manager
	defer func() {
		if m != nil {
			_ = m.Stop()
		}
		h.Stop()
		switch {
		case err != nil:
			fmt.Fprintf(out, "\nLogs kept in %s\n", h.World.LogDir())
		case os.Getenv(world.KeepEnv) == "":
			_ = os.RemoveAll(h.World.Dir())
		}
	}()

	m, err = h.StartManager(storyCtx, fmt.Sprintf("--power-poll-interval=%s", powerPollPeriod))
	if err != nil {
		return nil, fmt.Errorf("starting the manager: %w", err)
	}
	say("started the manager as user %s: pid %d, log %s", harness.ManagerUser, m.PID(), m.LogPath)

	st, err := tell(storyCtx, ctx, opts, out, h, m)
	if err == nil && opts.afterStory != nil {
		err = opts.afterStory(storyCtx, h)
	}
	if err != nil {
		err = fmt.Errorf("%w\n    manager log: %s", err, m.LogPath)
	} else {
		fmt.Fprintf(out, "The demo took %.0fs.\n", opts.Clock.Since(begun).Seconds())
	}
	if opts.Keep && ctx.Err() == nil {
		if err != nil {
			fmt.Fprintf(out, "\nThe demo failed: %v\n", err)
		}
		lookAround(out, h, m, opts.Workers)
		<-ctx.Done()
		fmt.Fprintf(out, "\nStopping everything.\n")
	}
	return st, err
}

// tell applies the health check, breaks a node and follows the story to a clean end.
func tell(storyCtx, ctx context.Context, opts options, out io.Writer, h *harness.Harness, m *harness.Manager) (*story, error) {
	say := func(format string, args ...any) { fmt.Fprintf(out, "==> "+format+"\n", args...) }
	powerCut := opts.Story == storyPowerCut
	if err := apply(storyCtx, h.Client, powerCut); err != nil {
		return nil, err
	}
	say("applied PowerCycleRemediationTemplate %s/%s and NodeHealthCheck %s:", harness.Namespace, checkName, checkName)
	fmt.Fprintf(out, "      a worker NotReady for %s is power-cycled through its BMC (power-off confirmed within %ds, Ready within %ds)\n",
		unhealthyFor, powerOffTimeout, powerOnTimeout)
	if powerCut {
		fmt.Fprintf(out, "      and so is one whose BMC reports it powered off (PoweredOff=True, for 0s)\n")
		if err := watchPower(storyCtx, h.Client); err != nil {
			return nil, err
		}
		say("every BMC's power is watched: its event stream if it offers one, a poll every %s otherwise (spec.powerWatch)", powerWatchPoll)
	}

	node := harness.NodeName(2)
	st := newStory(opts.Clock, out, node, harness.SystemID(node))
	if powerCut {
		st.required = powerCutSteps
	}
	h.Mock.OnPowerChange(func(id string, from, to redfishmock.PowerState) {
		st.observePower(id, string(from), string(to))
	})
	if err := watch(storyCtx, h.World.RESTConfig(), st, harness.Namespace, leaseNamespace); err != nil {
		return st, err
	}

	say("waiting for the %d BMCs to be reachable and the NodeHealthCheck to see %d healthy nodes", opts.Workers, opts.Workers)
	if err := waitReady(storyCtx, h.Client, opts.Workers); err != nil {
		return st, err
	}
	if powerCut {
		return st, tellPowerCut(storyCtx, ctx, opts, out, h, m, st)
	}

	fmt.Fprintf(out, "\nBreaking %s: its kubelet hangs while the host stays on (a power cycle cures it).\n", node)
	fmt.Fprintf(out, "Node monitor grace period %s, NodeHealthCheck duration %s, BMC power transition %s, boot %s.\n\n",
		gracePeriod, unhealthyFor, bmcPowerDelay, bootDelay)
	st.begin(fmt.Sprintf("the kubelet of %s hangs: no more heartbeats; its host stays powered on", node))
	if err := h.Sim.InjectFault(node, nodesim.FaultTransient); err != nil {
		return st, fmt.Errorf("injecting the fault: %w", err)
	}

	err := follow(storyCtx, ctx, st, m)
	st.end()
	if err != nil {
		return st, err
	}
	if err := verifyClean(storyCtx, h, node, []string{"ForceOff", "On"}); err != nil {
		return st, err
	}

	fmt.Fprintf(out, "\nSummary (times since the failure)\n")
	for _, line := range summarize(st.Seen(), timings{GracePeriod: gracePeriod, UnhealthyFor: unhealthyFor,
		BootDelay: bootDelay, HealthyDelay: healthyDelay, SimulatedBMCTime: bmcPowerDelay}) {
		fmt.Fprintln(out, line)
	}
	fmt.Fprintf(out, "\nAll clean: %s is Ready, every host is on, no taint, remediation request or node lease is left,\n", node)
	fmt.Fprintf(out, "and only %s's host was power-cycled (once).\n", node)
	return st, nil
}

// tellPowerCut cuts the power of worker-2's host and follows its fence on the BMC's word, and its return.
func tellPowerCut(storyCtx, ctx context.Context, opts options, out io.Writer, h *harness.Harness, m *harness.Manager, st *story) error {
	node := st.node
	if err := waitWatched(storyCtx, m, opts.Workers); err != nil {
		return err
	}
	how := fmt.Sprintf("a poll every %s", powerWatchPoll)
	if opts.DropEventStream {
		if err := dropEventStreams(storyCtx, h, m); err != nil {
			return err
		}
		how += " (its event stream dropped)"
	} else if streams, _ := managerGauge(storyCtx, m, "metalheal_power_watch_streams"); streams > 0 {
		how = "its event stream"
	}
	fmt.Fprintf(out, "\nCutting the power of %s's host (the BMC simulator's control API): its kubelet stops at once,\n", node)
	fmt.Fprintf(out, "its Node stays Ready until the grace period (%s) runs out. The BMC tells metalheal through %s.\n\n", gracePeriod, how)
	st.begin(fmt.Sprintf("the power of %s's host is cut; its Node is still Ready", node))
	if err := cutPower(storyCtx, h, st.system); err != nil {
		return err
	}

	err := follow(storyCtx, ctx, st, m)
	st.end()
	if err != nil {
		return err
	}
	if err := verifyClean(storyCtx, h, node, []string{"On"}); err != nil {
		return err
	}
	poweredOffAt, _ := st.PoweredOffAt()
	fmt.Fprintf(out, "\nSummary (times since the power cut)\n")
	for _, line := range summarizePowerCut(st.Seen(), poweredOffAt, how, timings{GracePeriod: gracePeriod, UnhealthyFor: unhealthyFor,
		BootDelay: bootDelay, HealthyDelay: healthyDelay, SimulatedBMCTime: bmcPowerDelay}) {
		fmt.Fprintln(out, line)
	}
	fmt.Fprintf(out, "\nAll clean: %s is Ready, every host is on, no taint, remediation request or node lease is left;\n", node)
	fmt.Fprintf(out, "%s's host was only powered on again (its BMC's reading was the confirmed power-off), the others never touched.\n", node)
	return nil
}

// watchPower sets spec.powerWatch on every BMC: the BMC's event stream when it offers one, a poll every
// powerWatchPoll otherwise.
func watchPower(ctx context.Context, c client.Client) error {
	var bmcs v1alpha1.BMCList
	if err := c.List(ctx, &bmcs, client.InNamespace(harness.Namespace)); err != nil {
		return err
	}
	for i := range bmcs.Items {
		b := &bmcs.Items[i]
		patch := client.MergeFrom(b.DeepCopy())
		b.Spec.PowerWatch = &v1alpha1.PowerWatch{EventStream: v1alpha1.PowerWatchEventStreamAuto, PollIntervalSeconds: int32(powerWatchPoll / time.Second)}
		if err := c.Patch(ctx, b, patch); err != nil {
			return fmt.Errorf("watching the power of BMC %s: %w", b.Name, err)
		}
	}
	return nil
}

// waitWatched waits until the manager watches the power of every host, and a poll interval more (the
// event streams open, or the first polls are done).
func waitWatched(ctx context.Context, m *harness.Manager, workers int) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	err := wait.PollUntilContextCancel(ctx, pollInterval, true, func(ctx context.Context) (bool, error) {
		v, err := managerGauge(ctx, m, "metalheal_power_watch_hosts")
		return err == nil && v >= float64(workers), nil
	})
	if err != nil {
		return fmt.Errorf("the manager did not watch the %d hosts' power within %s: %w", workers, readyTimeout, err)
	}
	return nil
}

// dropEventStreams switches the simulator's event service off, which drops every open stream, and waits
// until the manager holds none: from then on only its poll tells of a power change.
func dropEventStreams(ctx context.Context, h *harness.Harness, m *harness.Manager) error {
	if err := h.Mock.SetEventService(redfishmock.EventServiceDisabled); err != nil {
		return fmt.Errorf("switching the simulator's event service off: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	err := wait.PollUntilContextCancel(ctx, pollInterval, true, func(ctx context.Context) (bool, error) {
		v, err := managerGauge(ctx, m, "metalheal_power_watch_streams")
		return err == nil && v == 0, nil
	})
	if err != nil {
		return fmt.Errorf("the manager still held an event stream %s after the simulator dropped them: %w", readyTimeout, err)
	}
	return nil
}

// managerGauge reads a gauge of the manager's metrics (0 when absent).
func managerGauge(ctx context.Context, m *harness.Manager, name string) (float64, error) {
	body, err := m.Metrics(ctx)
	if err != nil {
		return 0, err
	}
	match := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` ([0-9.e+]+)$`).FindSubmatch(body)
	if match == nil {
		return 0, nil
	}
	return strconv.ParseFloat(string(match[1]), 64)
}

// cutPower cuts a host's power through the BMC simulator's control API, as the README's curl does.
func cutPower(ctx context.Context, h *harness.Harness, system string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.Mock.URL()+"/mock/systems/"+system+"/power",
		strings.NewReader(`{"powerState":"Off"}`))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("cutting the power of system %s: %w", system, err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode >= 300 {
		return fmt.Errorf("cutting the power of system %s: the control API answered %s", system, resp.Status)
	}
	return nil
}

// apply creates the demo's template and health check, as config/samples does with shorter timeouts; with
// powerCut the check also fences on the BMC's word (PoweredOff=True for 0s).
func apply(ctx context.Context, c client.Client, powerCut bool) error {
	tmpl := &v1alpha1.PowerCycleRemediationTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: checkName, Namespace: harness.Namespace},
		Spec: v1alpha1.PowerCycleRemediationTemplateSpec{Template: v1alpha1.PowerCycleRemediationTemplateResource{
			Spec: v1alpha1.PowerCycleRemediationSpec{
				Strategy:               v1alpha1.StrategyEscalate,
				DeleteAfterRetries:     ptr.To[int32](3),
				PowerOffTimeoutSeconds: powerOffTimeout,
				PowerOnTimeoutSeconds:  powerOnTimeout,
				RetryBackoff:           &v1alpha1.RetryBackoff{Initial: metav1.Duration{Duration: 5 * time.Second}, Max: metav1.Duration{Duration: 30 * time.Second}},
				OutOfServiceTaint:      ptr.To(true),
			},
		}},
	}
	if err := c.Create(ctx, tmpl); err != nil {
		return fmt.Errorf("creating the PowerCycleRemediationTemplate: %w", err)
	}
	check := &v1alpha1.NodeHealthCheck{
		ObjectMeta: metav1.ObjectMeta{Name: checkName},
		Spec: v1alpha1.NodeHealthCheckSpec{
			Selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "node-role.kubernetes.io/worker", Operator: metav1.LabelSelectorOpExists},
			}},
			UnhealthyConditions: []v1alpha1.NodeUnhealthyCondition{
				{Type: string(corev1.NodeReady), Status: "False", Duration: metav1.Duration{Duration: unhealthyFor}},
				{Type: string(corev1.NodeReady), Status: "Unknown", Duration: metav1.Duration{Duration: unhealthyFor}},
			},
			// One node at a time, however many workers: more would be a storm, not a broken node.
			MaxUnhealthy: ptr.To(intstr.FromInt32(1)),
			HealthyDelay: &metav1.Duration{Duration: healthyDelay},
			RemediationTemplate: &v1alpha1.TemplateReference{
				APIVersion: v1alpha1.GroupVersion.String(),
				Kind:       "PowerCycleRemediationTemplate",
				Name:       checkName,
				Namespace:  harness.Namespace,
			},
		},
	}
	if powerCut {
		check.Spec.UnhealthyConditions = append(check.Spec.UnhealthyConditions,
			v1alpha1.NodeUnhealthyCondition{Type: v1alpha1.NodeConditionPoweredOff, Status: "True", Duration: metav1.Duration{}})
	}
	if err := c.Create(ctx, check); err != nil {
		return fmt.Errorf("creating the NodeHealthCheck: %w", err)
	}
	return nil
}

// waitReady waits until every BMC is reachable with valid credentials and powered on, and the
// NodeHealthCheck sees every worker healthy.
func waitReady(ctx context.Context, c client.Client, workers int) error {
	var why string
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	err := wait.PollUntilContextCancel(ctx, pollInterval, true, func(ctx context.Context) (bool, error) {
		var bmcs v1alpha1.BMCList
		if err := c.List(ctx, &bmcs, client.InNamespace(harness.Namespace)); err != nil {
			why = err.Error()
			return false, nil
		}
		if len(bmcs.Items) != workers {
			why = fmt.Sprintf("%d BMCs, want %d", len(bmcs.Items), workers)
			return false, nil
		}
		for _, b := range bmcs.Items {
			for _, t := range []string{v1alpha1.ConditionReachable, v1alpha1.ConditionCredentialsValid} {
				if cond := metav1ConditionStatus(b.Status.Conditions, t); cond != metav1.ConditionTrue {
					why = fmt.Sprintf("BMC %s: %s is %q", b.Name, t, cond)
					return false, nil
				}
			}
			if b.Status.PowerState != v1alpha1.PowerOn {
				why = fmt.Sprintf("BMC %s: power %q", b.Name, b.Status.PowerState)
				return false, nil
			}
		}
		var check v1alpha1.NodeHealthCheck
		if err := c.Get(ctx, client.ObjectKey{Name: checkName}, &check); err != nil {
			why = err.Error()
			return false, nil
		}
		s := check.Status
		if s.Phase != v1alpha1.PhaseEnabled || ptr.Deref(s.ObservedNodes, 0) != int32(workers) || ptr.Deref(s.HealthyNodes, 0) != int32(workers) {
			why = fmt.Sprintf("NodeHealthCheck %s: phase %q, %d of %d nodes healthy (%s)", checkName, s.Phase,
				ptr.Deref(s.HealthyNodes, 0), ptr.Deref(s.ObservedNodes, 0), s.Reason)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("the world was not ready within %s: %s: %w", readyTimeout, why, err)
	}
	return nil
}

func metav1ConditionStatus(conds []metav1.Condition, t string) metav1.ConditionStatus {
	for _, c := range conds {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}

// follow waits until the story is complete, the remediation fails, the manager dies or time runs out
// (storyCtx; parent is done when the user interrupts).
func follow(storyCtx, parent context.Context, st *story, m *harness.Manager) error {
	for {
		if err := st.Failure(); err != nil {
			return err
		}
		if len(st.Missing()) == 0 {
			return nil
		}
		select {
		case <-st.Changed():
		case <-m.Exited():
			return fmt.Errorf("%w during the story; %s", ErrManagerExited, st.Where())
		case <-storyCtx.Done():
			if parent.Err() != nil {
				return fmt.Errorf("interrupted: %w", parent.Err())
			}
			return fmt.Errorf("%w: %s", ErrTimedOut, st.Where())
		}
	}
}

// verifyClean reads the end state from the API and the BMC simulator: the node Ready without the
// remediator's taints, no remediation request, no node lease, every host on and running, only the
// broken host reset (as wantResets says), and the NodeHealthCheck back to watching.
func verifyClean(ctx context.Context, h *harness.Harness, node string, wantResets []string) error {
	var problems []string
	ctx, cancel := context.WithTimeout(ctx, cleanTimeout)
	defer cancel()
	err := wait.PollUntilContextCancel(ctx, pollInterval, true, func(ctx context.Context) (bool, error) {
		problems = cleanProblems(ctx, h, node, wantResets)
		return len(problems) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("%w: %s", ErrNotClean, strings.Join(problems, "; "))
	}
	return nil
}

func cleanProblems(ctx context.Context, h *harness.Harness, node string, wantResets []string) []string {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	var n corev1.Node
	if err := h.Client.Get(ctx, client.ObjectKey{Name: node}, &n); err != nil {
		add("node %s: %v", node, err)
	} else {
		if c := timeline.ReadyCondition(&n); c == nil || c.Status != corev1.ConditionTrue {
			add("node %s is not Ready", node)
		}
		for _, t := range n.Spec.Taints {
			if t.Key == v1alpha1.TaintRemediation || t.Key == v1alpha1.TaintOutOfService {
				add("node %s still has the taint %s", node, t.Key)
			}
		}
	}
	var pcrs v1alpha1.PowerCycleRemediationList
	if err := h.Client.List(ctx, &pcrs); err != nil {
		add("listing remediations: %v", err)
	} else if len(pcrs.Items) > 0 {
		add("%d PowerCycleRemediation(s) left, e.g. %s/%s", len(pcrs.Items), pcrs.Items[0].Namespace, pcrs.Items[0].Name)
	}
	var lease coordinationv1.Lease
	if err := h.Client.Get(ctx, client.ObjectKey{Namespace: leaseNamespace, Name: leases.LeaseName(node)}, &lease); err == nil {
		add("the node lease %s/%s is still there (holder %s)", leaseNamespace, lease.Name, ptr.Deref(lease.Spec.HolderIdentity, ""))
	} else if !apierrors.IsNotFound(err) {
		add("reading the node lease: %v", err)
	}
	for _, id := range h.Mock.SystemIDs() {
		name := harness.WorkerPrefix + "-" + id
		if ps, err := h.Mock.PowerState(id); err != nil || ps != redfishmock.PowerOn {
			add("host %s: power %s %v", name, ps, err)
		}
		if s, err := h.Sim.State(name); err != nil || s != nodesim.StateRunning {
			add("host %s: kubelet %s %v", name, s, err)
		}
		resets, _ := h.Mock.Resets(id)
		switch {
		case name == node && !slices.Equal(resets, wantResets):
			add("host %s was reset %d times (%v), want %v", name, len(resets), resets, wantResets)
		case name != node && len(resets) != 0:
			add("host %s was reset (%v) although it never failed", name, resets)
		}
	}
	var check v1alpha1.NodeHealthCheck
	if err := h.Client.Get(ctx, client.ObjectKey{Name: checkName}, &check); err != nil {
		add("NodeHealthCheck %s: %v", checkName, err)
	} else if check.Status.Phase != v1alpha1.PhaseEnabled || len(check.Status.UnhealthyNodes) > 0 || len(check.Status.InFlightRemediations) > 0 {
		add("NodeHealthCheck %s: phase %s, %d unhealthy node(s), %d remediation(s) in flight", checkName,
			check.Status.Phase, len(check.Status.UnhealthyNodes), len(check.Status.InFlightRemediations))
	}
	return problems
}

// lookAround tells the user how to look at the world that --keep leaves running.
func lookAround(out io.Writer, h *harness.Harness, m *harness.Manager, workers int) {
	fmt.Fprintf(out, `
Left running; Ctrl-C stops everything. Look around (kubectl talks to the local API server as admin):

  export KUBECONFIG=%s
  kubectl get nodes
  kubectl get metalheal -A                      # NodeHealthCheck, template, BMCs, remediations
  kubectl describe nhc %s
  kubectl get events -A --sort-by=.lastTimestamp
  kubectl -n %s get leases

Break another node (its host loses power; metalheal power-cycles it back):

  curl -X POST %s/mock/systems/%d/power -d '{"powerState":"Off"}'
  kubectl get nodes,pcr -A -w

Read the manager's metrics (HTTPS, with a token of a service account bound to %s):

  curl -sk -H "Authorization: Bearer $(cat %s)" %s | grep ^metalheal_

Manager log: %s
Other logs:  %s
`, h.World.Kubeconfig(), checkName, leaseNamespace, h.Mock.URL(), workers,
		harness.MetricsReaderRole, h.MetricsTokenFile, m.MetricsURL, m.LogPath, h.World.LogDir())
}

// prefixWriter prefixes every write (the harness logs one line per write).
type prefixWriter struct {
	out    io.Writer
	prefix string
}

func (w prefixWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(w.out, w.prefix+string(p)); err != nil {
		return 0, err
	}
	return len(p), nil
}
