package powercycle

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/pkg/bmc"
	"github.com/metalheal/metalheal/pkg/bmc/fake"
	"github.com/metalheal/metalheal/pkg/bmc/ipmi"
	"github.com/metalheal/metalheal/test/ipmisim"
	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
)

func TestNextOffPhase(t *testing.T) {
	const (
		diagnosing  = v1alpha1.PhaseDiagnosing
		shutting    = v1alpha1.PhaseShuttingDown
		poweringOff = v1alpha1.PhasePoweringOff
	)
	for _, tc := range []struct {
		name           string
		diag, graceful time.Duration
		from           v1alpha1.PowerCyclePhase
		want           v1alpha1.PowerCyclePhase
	}{
		{name: "neither: straight to the power-off", want: poweringOff},
		{name: "an NMI first", diag: time.Minute, graceful: time.Minute, want: diagnosing},
		{name: "a graceful shutdown first", graceful: time.Minute, want: shutting},
		{name: "after the NMI, the graceful shutdown", diag: time.Minute, graceful: time.Minute, from: diagnosing, want: shutting},
		{name: "after the NMI, the power-off", diag: time.Minute, from: diagnosing, want: poweringOff},
		{name: "after the graceful shutdown, the power-off", diag: time.Minute, graceful: time.Minute, from: shutting, want: poweringOff},
	} {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(nextOffPhase(effectiveSpec{diagnosticTimeout: tc.diag, gracefulTimeout: tc.graceful}, tc.from)).To(Equal(tc.want))
		})
	}
}

func TestHostWaitVerdict(t *testing.T) {
	at := metav1.NewTime(epoch)
	sent := &v1alpha1.HostRequest{Requested: &at}
	wentDown := &v1alpha1.HostRequest{Requested: &at, WentDown: &at}
	const (
		on      = bmc.PowerStateOn
		off     = bmc.PowerStateOff
		unknown = bmc.PowerStateUnknown
	)
	for _, tc := range []struct {
		name     string
		state    bmc.PowerState
		rec      *v1alpha1.HostRequest
		reboots  bool
		expired  bool
		want     v1alpha1.HostRequestResult
		wantDown bool
	}{
		{name: "off before anything was sent", state: off, want: v1alpha1.HostRequestPoweredOff},
		{name: "off after the request", state: off, rec: sent, reboots: true, want: v1alpha1.HostRequestPoweredOff},
		{name: "off at the deadline is off", state: off, rec: sent, expired: true, want: v1alpha1.HostRequestPoweredOff},
		{name: "on: waiting", state: on, rec: sent, reboots: true},
		{name: "going down is recorded", state: unknown, rec: sent, reboots: true, wantDown: true},
		{name: "going down, recorded already", state: unknown, rec: wentDown, reboots: true},
		{name: "on again after going down: rebooted", state: on, rec: wentDown, reboots: true, want: v1alpha1.HostRequestRebooted},
		{name: "a graceful shutdown counts no reboot", state: unknown, rec: sent},
		{name: "nothing sent: no reboot either", state: unknown, reboots: true},
		{name: "on at the deadline", state: on, rec: sent, reboots: true, expired: true, want: v1alpha1.HostRequestTimedOut},
		{name: "going down at the deadline", state: unknown, rec: sent, reboots: true, expired: true, want: v1alpha1.HostRequestTimedOut},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got, down := hostWaitVerdict(tc.state, tc.rec, tc.reboots, tc.expired)
			g.Expect(got).To(Equal(tc.want))
			g.Expect(down).To(Equal(tc.wantDown))
		})
	}
}

// Issue 34's "diagnose before a reset" and "graceful, then hard", against the suite's API server, with
// fake hosts, the Redfish mock and ipmi_sim, Reconcile called directly.
var _ = Describe("Host requests before a power-off", func() {
	// Existing templates ask for neither: the host gets no interrupt and no graceful shutdown, only the
	// forced power-off, and the attempt records neither.
	It("none unless asked", func(ctx SpecContext) {
		w, hosts := fakeHosts(ctx)
		node := w.fakeHost(ctx, "worker", nil)
		host := hosts.Driver(fakeAddress(node))
		key := w.nhcRemediation(ctx, node, spec(reboot, 3))

		steps := w.drive(ctx, key, same(w.reconciler()), w.kubeletOnPowerOn(ctx, node, always), untilSettled)

		Expect(phases(steps)).NotTo(ContainElements(v1alpha1.PhaseDiagnosing, v1alpha1.PhaseShuttingDown))
		Expect(hostCalls(host)).To(Equal([]string{"Off", "On"}))
		a := firstAttempt(Default, w.get(ctx, key))
		Expect(a.DiagnosticInterrupt).To(BeNil())
		Expect(a.GracefulShutdown).To(BeNil())
		Expect(w.eventReasons(offPhases...)).To(Equal([]string{EventPoweringOff, EventPoweredOff}))
	})

	// The diagnostic interrupt is recorded in the request's status before it is sent (a manager that
	// restarts never sends a second), with the node already cordoned. A host that ignores it is waited for
	// up to the bound, then powered off by force: the request record shows the interrupt, the wait that
	// ended TimedOut, then the power-off; so do the events.
	It("interrupt recorded before it is sent", func(ctx SpecContext) {
		w, hosts := fakeHosts(ctx)
		node := w.fakeHost(ctx, "worker", nil)
		host := hosts.Driver(fakeAddress(node))
		key := w.nhcRemediation(ctx, node, hostSpec(120, 0))
		type seen struct {
			phase              v1alpha1.PowerCyclePhase
			recorded, tainted  bool
			requestedInAttempt bool
		}
		var atInterrupt []seen
		w.registry = bmc.NewRegistry()
		w.must(w.registry.Register(bmc.DriverRedfish, func(addr bmc.Address, creds bmc.Credentials, opts bmc.Options) (bmc.Driver, error) {
			d, err := hosts.New(addr, creds, opts)
			return &diagnoseChecking{Driver: d, before: func() {
				p := &v1alpha1.PowerCycleRemediation{}
				w.must(w.c.Get(ctx, key, p)) // straight from the API server
				atInterrupt = append(atInterrupt, seen{
					phase:              p.Status.Phase,
					recorded:           p.Status.PowerRequest != nil && p.Status.PowerRequest.Target == v1alpha1.PowerOff,
					tainted:            slices.Contains(w.taintKeys(ctx, node), v1alpha1.TaintRemediation),
					requestedInAttempt: len(p.Status.Attempts) == 1 && p.Status.Attempts[0].DiagnosticInterrupt != nil && p.Status.Attempts[0].DiagnosticInterrupt.Requested != nil,
				})
			}}, err
		}))

		steps := w.drive(ctx, key, same(w.reconciler()), w.kubeletOnPowerOn(ctx, node, always), untilSettled)

		Expect(atInterrupt).To(Equal([]seen{{phase: v1alpha1.PhaseDiagnosing, recorded: true, tainted: true, requestedInAttempt: true}}))
		Expect(phases(steps)).To(HaveExactElements(v1alpha1.PhaseDiagnosing, v1alpha1.PhasePoweringOff, v1alpha1.PhasePoweringOn,
			v1alpha1.PhaseWaitingForNode, v1alpha1.PhaseSucceeded))
		Expect(hostCalls(host)).To(Equal([]string{"Diagnose", "Off", "On"}), "the interrupt, once, then the forced power-off")
		a := firstAttempt(Default, w.get(ctx, key))
		Expect(a.DiagnosticInterrupt.Result).To(Equal(v1alpha1.HostRequestTimedOut))
		Expect(waited(a.DiagnosticInterrupt)).To(Equal(120*time.Second), "the wait ends at its bound, not before")
		Expect(a.DiagnosticInterrupt.Message).To(ContainSubstring("still reads On 2m0s after the diagnostic interrupt"))
		Expect(a.PoweredOff.Time).To(BeTemporally(">=", a.DiagnosticInterrupt.Ended.Time))
		Expect(a.GracefulShutdown).To(BeNil())
		events := w.drainEvents()
		Expect(w.eventReasons(offPhases...)).To(Equal([]string{EventDiagnosing, EventDiagnosticInterruptEnded, EventPoweringOff, EventPoweredOff}))
		Expect(events).To(ContainElement(And(HavePrefix("Normal Diagnosing Attempt 1: asking node "+node+" for a kernel dump"), ContainSubstring("up to 2m0s"))))
		Expect(events).To(ContainElement(HavePrefix("Normal DiagnosticInterruptEnded TimedOut: node " + node + " still reads On")))
		Expect(testutilCounter(HostRequests.WithLabelValues("DiagnosticInterrupt", "TimedOut"))).To(BeNumerically(">=", 1))
	})

	// A host that writes its kernel dump and powers itself off (Redfish mock: 30s after the Nmi reset, then
	// the 5s power transition) ends the wait early: no ForceOff is ever sent, and the power-off phase only
	// confirms the host is off.
	It("host powers itself off after the interrupt", func(ctx SpecContext) {
		w, m := mockHosts(ctx, func(m *redfishmock.Mock) *redfishmock.Mock {
			return m.WithSystems(1).WithPowerDelay(5 * time.Second).WithHost(redfishmock.Host{PowerOffAfterNMI: 30 * time.Second})
		})
		node := w.node(ctx, "worker", nil)
		w.bmc(ctx, node, mockAddress(m, "1"), map[string]string{bmc.UsernameKey: "admin", bmc.PasswordKey: "password"})
		key := w.nhcRemediation(ctx, node, hostSpec(600, 0))

		w.drive(ctx, key, same(w.reconciler()), w.kubeletOnPowerOn(ctx, node, always), untilSettled)

		Expect(m.Resets("1")).To(Equal([]string{"Nmi", "On"}), "the NMI before anything else, and no ForceOff: the host went off on its own")
		p := w.get(ctx, key)
		Expect(p.Status.Phase).To(Equal(v1alpha1.PhaseSucceeded))
		a := firstAttempt(Default, p)
		Expect(a.DiagnosticInterrupt.Result).To(Equal(v1alpha1.HostRequestPoweredOff))
		Expect(waited(a.DiagnosticInterrupt)).To(And(BeNumerically(">=", 35*time.Second), BeNumerically("<=", 40*time.Second)),
			"ended when the host read Off, long before the 10m bound")
		Expect(a.DiagnosticInterrupt.WentDown).NotTo(BeNil(), "seen powering off on the way")
		Expect(a.PoweredOff).NotTo(BeNil())
		Expect(w.eventReasons(offPhases...)).To(Equal([]string{EventDiagnosing, EventDiagnosticInterruptEnded, EventPoweringOff, EventPoweredOff}))
	})

	// A host that dumps its kernel and reboots (Redfish mock: the power is cut 30s after the NMI and comes
	// back in 5s): the BMC shows it going down and on again, which ends the wait (Rebooted); the forced
	// power-off follows.
	It("host reboots after the interrupt", func(ctx SpecContext) {
		w, m := mockHosts(ctx, func(m *redfishmock.Mock) *redfishmock.Mock {
			return m.WithSystems(1).WithPowerDelay(5 * time.Second).WithHost(redfishmock.Host{RebootAfterNMI: 30 * time.Second})
		})
		node := w.node(ctx, "worker", nil)
		w.bmc(ctx, node, mockAddress(m, "1"), map[string]string{bmc.UsernameKey: "admin", bmc.PasswordKey: "password"})
		key := w.nhcRemediation(ctx, node, hostSpec(600, 0))

		w.drive(ctx, key, same(w.reconciler()), w.kubeletOnPowerOn(ctx, node, always), untilSettled)

		Expect(m.Resets("1")).To(Equal([]string{"Nmi", "ForceOff", "On"}))
		a := firstAttempt(Default, w.get(ctx, key))
		Expect(a.DiagnosticInterrupt.Result).To(Equal(v1alpha1.HostRequestRebooted))
		Expect(waited(a.DiagnosticInterrupt)).To(BeNumerically("<=", 40*time.Second))
		Expect(a.DiagnosticInterrupt.Message).To(ContainSubstring("is on again"))
		Expect(w.drainEvents()).To(ContainElement(HavePrefix("Normal DiagnosticInterruptEnded Rebooted: ")))
	})

	// A BMC whose system does not allow the Nmi reset (absent from its AllowableValues) is no failure: the
	// wait ends NotSupported at once, the BMC stays Ready, and the power-off goes on.
	It("interrupt not supported", func(ctx SpecContext) {
		w, m := mockHosts(ctx, func(m *redfishmock.Mock) *redfishmock.Mock {
			return m.WithSystems(1).WithResetTypes("On", "ForceOff", "GracefulShutdown")
		})
		node := w.node(ctx, "worker", nil)
		w.bmc(ctx, node, mockAddress(m, "1"), map[string]string{bmc.UsernameKey: "admin", bmc.PasswordKey: "password"})
		key := w.nhcRemediation(ctx, node, hostSpec(300, 0))

		steps := w.drive(ctx, key, same(w.reconciler()), w.kubeletOnPowerOn(ctx, node, always), untilSettled)

		Expect(m.Resets("1")).To(Equal([]string{"ForceOff", "On"}))
		Expect(resetPosts(m, "1")).To(Equal(2), "no Nmi reset was even posted")
		p := w.get(ctx, key)
		Expect(p.Status.Phase).To(Equal(v1alpha1.PhaseSucceeded))
		Expect(p.Status.RetryCount).To(BeZero(), "not a failed attempt")
		a := firstAttempt(Default, p)
		Expect(a.DiagnosticInterrupt.Result).To(Equal(v1alpha1.HostRequestNotSupported))
		Expect(a.DiagnosticInterrupt.Message).To(ContainSubstring("does not allow the Nmi reset"))
		Expect(waited(a.DiagnosticInterrupt)).To(BeZero(), "the power-off went on at once")
		Expect(steps[0].phase).To(Equal(v1alpha1.PhasePoweringOff), "in the same reconcile")
		Expect(conditionOf(p, v1alpha1.ConditionBMCReady).Status).To(Equal(metav1.ConditionTrue))
		Expect(w.eventReasons(append(offPhases, EventBMCNotReady)...)).To(Equal([]string{EventDiagnosing, EventDiagnosticInterruptEnded, EventPoweringOff, EventPoweredOff}))
	})

	// A host that ignores the graceful shutdown (Redfish mock) is forced off at the bound, not before: the
	// mock records the GracefulShutdown, then the ForceOff.
	It("ignored graceful shutdown forced at the bound", func(ctx SpecContext) {
		w, m := mockHosts(ctx, func(m *redfishmock.Mock) *redfishmock.Mock {
			return m.WithSystems(1).WithPowerDelay(5 * time.Second).WithHost(redfishmock.Host{IgnoreGracefulShutdown: true})
		})
		node := w.node(ctx, "worker", nil)
		w.bmc(ctx, node, mockAddress(m, "1"), map[string]string{bmc.UsernameKey: "admin", bmc.PasswordKey: "password"})
		key := w.nhcRemediation(ctx, node, hostSpec(0, 60))
		var forcedAt time.Time
		m.OnPowerChange(func(_ string, _, to redfishmock.PowerState) {
			if to == redfishmock.PoweringOff && forcedAt.IsZero() {
				forcedAt = w.clock.Now()
			}
		})

		steps := w.drive(ctx, key, same(w.reconciler()), w.kubeletOnPowerOn(ctx, node, always), untilSettled)

		Expect(phases(steps)).To(HaveExactElements(v1alpha1.PhaseShuttingDown, v1alpha1.PhasePoweringOff, v1alpha1.PhasePoweringOn,
			v1alpha1.PhaseWaitingForNode, v1alpha1.PhaseSucceeded))
		Expect(m.Resets("1")).To(Equal([]string{"GracefulShutdown", "ForceOff", "On"}))
		a := firstAttempt(Default, w.get(ctx, key))
		Expect(a.GracefulShutdown.Result).To(Equal(v1alpha1.HostRequestTimedOut))
		Expect(waited(a.GracefulShutdown)).To(Equal(60 * time.Second))
		Expect(forcedAt.Sub(a.GracefulShutdown.Requested.Time)).To(Equal(60*time.Second), "the power went when the bound was reached")
		Expect(a.DiagnosticInterrupt).To(BeNil())
		Expect(w.eventReasons(offPhases...)).To(Equal([]string{EventShuttingDown, EventGracefulShutdownEnded, EventPoweringOff, EventPoweredOff}))
	})

	// A host that obeys the graceful shutdown is never forced off.
	It("graceful shutdown obeyed", func(ctx SpecContext) {
		w, m := mockHosts(ctx, func(m *redfishmock.Mock) *redfishmock.Mock { return m.WithSystems(1).WithPowerDelay(15 * time.Second) })
		node := w.node(ctx, "worker", nil)
		w.bmc(ctx, node, mockAddress(m, "1"), map[string]string{bmc.UsernameKey: "admin", bmc.PasswordKey: "password"})
		key := w.nhcRemediation(ctx, node, hostSpec(0, 60))

		w.drive(ctx, key, same(w.reconciler()), w.kubeletOnPowerOn(ctx, node, always), untilSettled)

		Expect(m.Resets("1")).To(Equal([]string{"GracefulShutdown", "On"}))
		a := firstAttempt(Default, w.get(ctx, key))
		Expect(a.GracefulShutdown.Result).To(Equal(v1alpha1.HostRequestPoweredOff))
		Expect(waited(a.GracefulShutdown)).To(And(BeNumerically(">=", 15*time.Second), BeNumerically("<", 60*time.Second)))
		Expect(w.drainEvents()).To(ContainElement(HavePrefix("Normal GracefulShutdownEnded PoweredOff: node " + node + " powered off on its own")))
	})

	// A system without GracefulShutdown: nothing is sent in its place by the driver; the remediator records
	// NotSupported and forces the power off.
	It("graceful shutdown not supported", func(ctx SpecContext) {
		w, m := mockHosts(ctx, func(m *redfishmock.Mock) *redfishmock.Mock { return m.WithSystems(1).WithResetTypes("On", "ForceOff") })
		node := w.node(ctx, "worker", nil)
		w.bmc(ctx, node, mockAddress(m, "1"), map[string]string{bmc.UsernameKey: "admin", bmc.PasswordKey: "password"})
		key := w.nhcRemediation(ctx, node, hostSpec(0, 60))

		w.drive(ctx, key, same(w.reconciler()), w.kubeletOnPowerOn(ctx, node, always), untilSettled)

		Expect(m.Resets("1")).To(Equal([]string{"ForceOff", "On"}))
		a := firstAttempt(Default, w.get(ctx, key))
		Expect(a.GracefulShutdown.Result).To(Equal(v1alpha1.HostRequestNotSupported))
		Expect(waited(a.GracefulShutdown)).To(BeZero())
	})

	// Both asked for: the interrupt, its wait, the graceful shutdown, its wait, then the forced power-off, in
	// that order, each once, each wait at its own bound.
	It("dump then graceful then forced", func(ctx SpecContext) {
		w, hosts := fakeHosts(ctx)
		node := w.fakeHost(ctx, "worker", nil)
		host := hosts.Driver(fakeAddress(node))
		host.IgnoreGracefulShutdown(true)
		key := w.nhcRemediation(ctx, node, hostSpec(90, 30))

		steps := w.drive(ctx, key, same(w.reconciler()), w.kubeletOnPowerOn(ctx, node, always), untilSettled)

		Expect(phases(steps)).To(HaveExactElements(v1alpha1.PhaseDiagnosing, v1alpha1.PhaseShuttingDown, v1alpha1.PhasePoweringOff,
			v1alpha1.PhasePoweringOn, v1alpha1.PhaseWaitingForNode, v1alpha1.PhaseSucceeded))
		Expect(hostCalls(host)).To(Equal([]string{"Diagnose", "Graceful", "Off", "On"}))
		a := firstAttempt(Default, w.get(ctx, key))
		Expect(a.DiagnosticInterrupt.Result).To(Equal(v1alpha1.HostRequestTimedOut))
		Expect(waited(a.DiagnosticInterrupt)).To(Equal(90 * time.Second))
		Expect(a.GracefulShutdown.Result).To(Equal(v1alpha1.HostRequestTimedOut))
		Expect(waited(a.GracefulShutdown)).To(Equal(30 * time.Second))
		Expect(a.GracefulShutdown.Requested.Time).To(BeTemporally(">=", a.DiagnosticInterrupt.Ended.Time))
		Expect(w.eventReasons(offPhases...)).To(Equal([]string{EventDiagnosing, EventDiagnosticInterruptEnded, EventShuttingDown,
			EventGracefulShutdownEnded, EventPoweringOff, EventPoweredOff}))
	})

	// A manager that restarts during a wait resumes from the status alone: the request is not sent again,
	// the wait ends at the same bound, and a host seen going down before the restart and on again after it
	// rebooted. Here a new reconciler (a new access layer: no cached driver, no memory) runs every reconcile.
	unknown := bmc.PowerStateUnknown
	on := bmc.PowerStateOn
	type restartMidWaitCase struct {
		spec         v1alpha1.PowerCycleRemediationSpec
		afterNMI     []bmc.PowerState
		ignoreSoft   bool
		wantCalls    []string
		wantDiag     v1alpha1.HostRequestResult
		wantGraceful v1alpha1.HostRequestResult
		wantWait     time.Duration // of the last of the two

	}
	DescribeTable("restart mid-wait", func(ctx SpecContext, tc restartMidWaitCase) {
		w, hosts := fakeHosts(ctx)
		node := w.fakeHost(ctx, "worker", nil)
		host := hosts.Driver(fakeAddress(node))
		host.AfterDiagnose(tc.afterNMI...)
		host.IgnoreGracefulShutdown(tc.ignoreSoft)
		key := w.nhcRemediation(ctx, node, tc.spec)

		restarts := 0
		w.drive(ctx, key, func() *RemediationReconciler { restarts++; return w.reconciler() }, w.kubeletOnPowerOn(ctx, node, always), untilSettled)

		Expect(restarts).To(BeNumerically(">", 5))
		Expect(hostCalls(host)).To(Equal(tc.wantCalls), "each request once, whatever the restarts")
		a := firstAttempt(Default, w.get(ctx, key))
		var last *v1alpha1.HostRequest
		if tc.wantDiag != "" {
			Expect(a.DiagnosticInterrupt.Result).To(Equal(tc.wantDiag))
			last = a.DiagnosticInterrupt
		}
		if tc.wantGraceful != "" {
			Expect(a.GracefulShutdown.Result).To(Equal(tc.wantGraceful))
			last = a.GracefulShutdown
		}
		if tc.wantWait > 0 {
			Expect(waited(last)).To(Equal(tc.wantWait))
		}
	},
		Entry("Diagnosing, the host ignores the interrupt", restartMidWaitCase{spec: hostSpec(120, 0),
			wantCalls: []string{"Diagnose", "Off", "On"}, wantDiag: v1alpha1.HostRequestTimedOut, wantWait: 120 * time.Second}),
		Entry("Diagnosing, the host reboots", restartMidWaitCase{spec: hostSpec(120, 0), afterNMI: []bmc.PowerState{on, unknown, unknown, on},
			wantCalls: []string{"Diagnose", "Off", "On"}, wantDiag: v1alpha1.HostRequestRebooted}),
		Entry("ShuttingDown, the host ignores it", restartMidWaitCase{spec: hostSpec(0, 45), ignoreSoft: true,
			wantCalls: []string{"Graceful", "Off", "On"}, wantGraceful: v1alpha1.HostRequestTimedOut, wantWait: 45 * time.Second}),
		Entry("both", restartMidWaitCase{spec: hostSpec(60, 45), ignoreSoft: true,
			wantCalls: []string{"Diagnose", "Graceful", "Off", "On"}, wantDiag: v1alpha1.HostRequestTimedOut, wantGraceful: v1alpha1.HostRequestTimedOut, wantWait: 45 * time.Second}),
	)

	// A host that is off already is sent neither request: the waits end at once, PoweredOff, and the power-off
	// phase confirms it and fences the node.
	It("host already off is sent nothing", func(ctx SpecContext) {
		w, hosts := fakeHosts(ctx)
		node := w.fakeHost(ctx, "worker", nil)
		host := hosts.Driver(fakeAddress(node))
		host.SetPowerState(bmc.PowerStateOff)
		key := w.nhcRemediation(ctx, node, hostSpec(300, 60))

		w.drive(ctx, key, same(w.reconciler()), w.kubeletOnPowerOn(ctx, node, always), untilSettled)

		Expect(hostCalls(host)).To(Equal([]string{"On"}))
		a := firstAttempt(Default, w.get(ctx, key))
		Expect(a.DiagnosticInterrupt.Result).To(Equal(v1alpha1.HostRequestPoweredOff))
		Expect(a.DiagnosticInterrupt.Requested).To(BeNil())
		Expect(a.DiagnosticInterrupt.Message).To(ContainSubstring("off already: no diagnostic interrupt was sent"))
		Expect(a.GracefulShutdown).To(BeNil(), "the next step after an off host is the power-off, which confirms it")
	})

	// A BMC that cannot be used for the whole wait: nothing is sent, the wait ends at its bound (TimedOut,
	// saying why), and the power-off phase takes over with its own bound; once the BMC answers, the host is
	// powered off by force, the interrupt never sent.
	It("BMC unusable through the wait", func(ctx SpecContext) {
		w, hosts := fakeHosts(ctx)
		node := w.fakeHost(ctx, "worker", nil)
		host := hosts.Driver(fakeAddress(node))
		host.FailAlways(bmc.OperationPowerState, &bmc.Error{Driver: "fake", Operation: bmc.OperationPowerState, Kind: bmc.ErrUnreachable, Err: errors.New("no answer")})
		key := w.nhcRemediation(ctx, node, hostSpec(60, 0))

		w.drive(ctx, key, same(w.reconciler()), nil, untilPhase(v1alpha1.PhasePoweringOff))

		p := w.get(ctx, key)
		a := firstAttempt(Default, p)
		Expect(a.DiagnosticInterrupt.Result).To(Equal(v1alpha1.HostRequestTimedOut))
		Expect(a.DiagnosticInterrupt.Requested).To(BeNil())
		Expect(a.DiagnosticInterrupt.Message).To(ContainSubstring("no diagnostic interrupt was sent within 1m0s: the BMC could not be used (Unreachable)"))
		Expect(a.DiagnosticInterrupt.Ended.Sub(a.Started.Time)).To(Equal(60 * time.Second))
		Expect(conditionOf(p, v1alpha1.ConditionBMCReady).Status).To(Equal(metav1.ConditionFalse))
		Expect(host.CallCount(bmc.OperationDiagnose)).To(BeZero())

		host.FailAlways(bmc.OperationPowerState, nil)
		w.drive(ctx, key, same(w.reconciler()), w.kubeletOnPowerOn(ctx, node, always), untilSettled)
		Expect(w.get(ctx, key).Status.Phase).To(Equal(v1alpha1.PhaseSucceeded))
		Expect(hostCalls(host)).To(Equal([]string{"Off", "On"}))
	})

	// The request is deleted while the host writes its dump (an NMI in flight, the host still on): the
	// clean-up does not take that On for the end of the story. It waits for the host to power itself off,
	// then powers it on, and sends no forced power-off.
	It("deleted while the host dumps", func(ctx SpecContext) {
		w, hosts := fakeHosts(ctx)
		node := w.fakeHost(ctx, "worker", nil)
		host := hosts.Driver(fakeAddress(node))
		on, off := bmc.PowerStateOn, bmc.PowerStateOff
		host.AfterDiagnose(on, on, on, on, off)
		key := w.nhcRemediation(ctx, node, hostSpec(300, 0))

		w.drive(ctx, key, same(w.reconciler()), nil, func(s []step) bool {
			p := w.get(ctx, key)
			return p.Status.Phase == v1alpha1.PhaseDiagnosing && p.Status.PowerRequest != nil
		})
		Expect(host.CallCount(bmc.OperationDiagnose)).To(Equal(1))
		w.must(w.c.Delete(ctx, w.get(ctx, key)))
		w.drive(ctx, key, same(w.reconciler()), nil, func(s []step) bool { return s[len(s)-1].gone })

		Expect(hostCalls(host)).To(Equal([]string{"Diagnose", "On"}), "waited for the host to go off on its own, then powered it on")
		Expect(host.PowerState(ctx)).To(Equal(bmc.PowerStateOn))
		Expect(w.taintKeys(ctx, node)).To(BeEmpty())
		Expect(w.lease(ctx, node)).To(BeNil())
	})

	// Against OpenIPMI's ipmi_sim: what it can show. It refuses every diagnostic interrupt (chassis power
	// diag: "Invalid data field in request"), so the request records NotSupported, with ipmi_sim's answer,
	// and the attempt goes on. A host on its system interface (ipmisim.ACPI) receives the soft power off for
	// real: a hung one ignores it and is forced off at the bound; one that obeys shuts down on its own.
	type ipmiSimCase struct {
		ignore       bool
		wantGraceful v1alpha1.HostRequestResult
		wantCommands []string
	}
	DescribeTable("IPMI against ipmi_sim", func(ctx SpecContext, tc ipmiSimCase) {
		sim := ipmisim.Start(GinkgoTB(), ipmisim.ACPI(tc.ignore))
		w := newWorld(ctx, bmc.NewRegistry())
		w.must(w.registry.Register(bmc.DriverIPMI, ipmi.New))
		w.reconcilerOptions = func(o *RemediationReconcilerOptions) { o.BMCCallTimeout = 20 * time.Second }
		node := w.node(ctx, "worker-ipmi", nil)
		w.bmc(ctx, node, sim.Address, map[string]string{bmc.UsernameKey: sim.Credentials.Username, bmc.PasswordKey: sim.Credentials.Password})
		key := w.nhcRemediation(ctx, node, hostSpec(60, 30))

		// ipmi_sim works in real time: before the next reconcile reads the power, wait (in real time)
		// for what was asked to show on the host.
		addr, err := bmc.ParseAddress(sim.Address)
		Expect(err).NotTo(HaveOccurred())
		observer, err := ipmi.New(addr, sim.Credentials, bmc.Options{RequestTimeout: 20 * time.Second})
		Expect(err).NotTo(HaveOccurred())
		landed := func(want bmc.PowerState) {
			Eventually(sim.HostPoweredOn).WithTimeout(20 * time.Second).WithPolling(100 * time.Millisecond).Should(Equal(want == bmc.PowerStateOn))
			Eventually(func() (bmc.PowerState, error) { return observer.PowerState(ctx) }).
				WithTimeout(20 * time.Second).WithPolling(200 * time.Millisecond).Should(Equal(want))
		}
		react := func(p *v1alpha1.PowerCycleRemediation) {
			r := p.Status.PowerRequest
			switch {
			case r == nil:
			case p.Status.Phase == v1alpha1.PhaseShuttingDown && tc.ignore:
				Eventually(sim.HostCommands).WithTimeout(20 * time.Second).Should(ContainElement("graceful-shutdown"))
			case p.Status.Phase == v1alpha1.PhaseShuttingDown:
				landed(bmc.PowerStateOff)
			case p.Status.Phase == v1alpha1.PhasePoweringOff || p.Status.Phase == v1alpha1.PhasePoweringOn:
				landed(bmc.PowerState(r.Target))
			}
			if p.Status.Phase == v1alpha1.PhaseWaitingForNode && sim.HostPoweredOn() {
				w.kubeletOnPowerOn(ctx, node, always)(p)
			}
		}
		w.drive(ctx, key, same(w.reconciler()), react, untilSettled)

		p := w.get(ctx, key)
		Expect(p.Status.Phase).To(Equal(v1alpha1.PhaseSucceeded))
		a := firstAttempt(Default, p)
		Expect(a.DiagnosticInterrupt.Result).To(Equal(v1alpha1.HostRequestNotSupported))
		Expect(a.DiagnosticInterrupt.Message).To(ContainSubstring("Set Chassis Power Control to Diag failed: Invalid data field in request"),
			"the request reached ipmi_sim, which refused it")
		Expect(a.GracefulShutdown.Result).To(Equal(tc.wantGraceful))
		if tc.ignore {
			Expect(waited(a.GracefulShutdown)).To(Equal(30 * time.Second))
		}
		Expect(sim.HostCommands()).To(Equal(tc.wantCommands), "what the host itself was passed by ipmi_sim")
		Expect(sim.HostPoweredOn()).To(BeTrue(), "and it is back")
		Expect(a.DiagnosticInterrupt.Message).NotTo(ContainSubstring(sim.Credentials.Password))
	},
		Entry("a hung host is forced off", ipmiSimCase{ignore: true, wantGraceful: v1alpha1.HostRequestTimedOut,
			wantCommands: []string{"graceful-shutdown", "power-off"},
		}),
		Entry("a host that shuts down", ipmiSimCase{wantGraceful: v1alpha1.HostRequestPoweredOff,
			wantCommands: []string{"graceful-shutdown"},
		}),
	)
})

// hostSpec is spec(reboot, 3) (power-off 60s) asking for a diagnostic interrupt and a graceful shutdown
// with these waits, in seconds (0: not asked for).
func hostSpec(diagnostic, graceful int32) v1alpha1.PowerCycleRemediationSpec {
	s := spec(reboot, 3)
	if diagnostic > 0 {
		s.DiagnosticInterrupt = &v1alpha1.DiagnosticInterrupt{TimeoutSeconds: diagnostic}
	}
	if graceful > 0 {
		s.GracefulShutdown = &v1alpha1.GracefulShutdown{TimeoutSeconds: graceful}
	}
	return s
}

// hostCalls lists what a fake host was asked, in order: "Diagnose", "Graceful", "Off" (forced), "On".
func hostCalls(d *fake.Driver) []string {
	var ops []string
	for _, c := range d.Calls() {
		switch {
		case c.Operation == bmc.OperationDiagnose:
			ops = append(ops, "Diagnose")
		case c.Operation == bmc.OperationPowerOff && !c.Force:
			ops = append(ops, "Graceful")
		case c.Operation == bmc.OperationPowerOff:
			ops = append(ops, "Off")
		case c.Operation == bmc.OperationPowerOn:
			ops = append(ops, "On")
		}
	}
	return ops
}

// eventReasons lists the reasons of the recorded events that are among reasons, in order.
func (w *world) eventReasons(reasons ...string) []string {
	var out []string
	for _, e := range w.drainEvents() {
		if f := strings.Fields(e); len(f) > 1 && slices.Contains(reasons, f[1]) {
			out = append(out, f[1])
		}
	}
	return out
}

// attempt is the remediation's first attempt.
func firstAttempt(g Gomega, p *v1alpha1.PowerCycleRemediation) v1alpha1.PowerCycleAttempt {
	Expect(p.Status.Attempts).NotTo(BeEmpty())
	return p.Status.Attempts[0]
}

// waited is how long the wait of a request lasted.
func waited(r *v1alpha1.HostRequest) time.Duration { return r.Ended.Sub(r.Requested.Time) }

var offPhases = []string{EventDiagnosing, EventDiagnosticInterruptEnded, EventShuttingDown, EventGracefulShutdownEnded, EventPoweringOff, EventPoweredOff}

// diagnoseChecking runs a check just before passing a diagnostic interrupt on.
type diagnoseChecking struct {
	bmc.Driver
	before func()
}

func (d *diagnoseChecking) Diagnose(ctx context.Context) error {
	d.before()
	return bmc.Diagnose(ctx, d.Driver)
}

// testutilCounter reads a counter's value.
func testutilCounter(c interface{ Write(*dto.Metric) error }) float64 {
	m := &dto.Metric{}
	if err := c.Write(m); err != nil {
		panic(errors.Join(errors.New("reading a counter"), err))
	}
	return m.GetCounter().GetValue()
}
