package redfishmock_test

import (
	"net/http"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
)

func TestReset(t *testing.T) {
	const delay = 10 * time.Second
	tests := map[string]struct {
		from        redfishmock.PowerState
		resetType   string
		delay       time.Duration
		during      redfishmock.PowerState // right after the reset
		after       redfishmock.PowerState // once the delay has passed
		wantChanges []string
	}{
		"ForceOff": {from: redfishmock.PowerOn, resetType: "ForceOff", delay: delay,
			during: redfishmock.PoweringOff, after: redfishmock.PowerOff,
			wantChanges: []string{"1:On->PoweringOff", "1:PoweringOff->Off"}},
		"GracefulShutdown": {from: redfishmock.PowerOn, resetType: "GracefulShutdown", delay: delay,
			during: redfishmock.PoweringOff, after: redfishmock.PowerOff,
			wantChanges: []string{"1:On->PoweringOff", "1:PoweringOff->Off"}},
		"On": {from: redfishmock.PowerOff, resetType: "On", delay: delay,
			during: redfishmock.PoweringOn, after: redfishmock.PowerOn,
			wantChanges: []string{"1:Off->PoweringOn", "1:PoweringOn->On"}},
		"PowerCycle cuts the power, then powers on": {from: redfishmock.PowerOn, resetType: "PowerCycle", delay: delay,
			during: redfishmock.PoweringOn, after: redfishmock.PowerOn,
			wantChanges: []string{"1:On->Off", "1:Off->PoweringOn", "1:PoweringOn->On"}},
		"ForceRestart when off powers on": {from: redfishmock.PowerOff, resetType: "ForceRestart", delay: delay,
			during: redfishmock.PoweringOn, after: redfishmock.PowerOn,
			wantChanges: []string{"1:Off->PoweringOn", "1:PoweringOn->On"}},
		"GracefulRestart": {from: redfishmock.PowerOn, resetType: "GracefulRestart", delay: delay,
			during: redfishmock.PoweringOn, after: redfishmock.PowerOn,
			wantChanges: []string{"1:On->Off", "1:Off->PoweringOn", "1:PoweringOn->On"}},
		"On when on changes nothing": {from: redfishmock.PowerOn, resetType: "On", delay: delay,
			during: redfishmock.PowerOn, after: redfishmock.PowerOn},
		"ForceOff when off changes nothing": {from: redfishmock.PowerOff, resetType: "ForceOff", delay: delay,
			during: redfishmock.PowerOff, after: redfishmock.PowerOff},
		"Nmi changes nothing": {from: redfishmock.PowerOn, resetType: "Nmi", delay: delay,
			during: redfishmock.PowerOn, after: redfishmock.PowerOn},
		"without a delay the change is at once": {from: redfishmock.PowerOn, resetType: "ForceOff",
			during: redfishmock.PowerOff, after: redfishmock.PowerOff,
			wantChanges: []string{"1:On->Off"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			clk := fakeClock()
			m := start(t, redfishmock.New().WithSystems(2).WithClock(clk).WithPowerDelay(tc.delay))
			g.Expect(m.SetPowerState("1", tc.from)).To(Succeed())
			var log powerLog
			m.OnPowerChange(log.hook)

			r := send(t, http.DefaultClient, m.URL(), admin("POST", resetPath, resetBody(tc.resetType)))
			g.Expect(r.status).To(Equal(http.StatusNoContent))
			g.Expect(m.PowerState("1")).To(Equal(tc.during))
			sys := send(t, http.DefaultClient, m.URL(), admin("GET", "/redfish/v1/Systems/1", ""))
			g.Expect(sys.json).To(HaveKeyWithValue("PowerState", string(tc.during)))

			clk.Step(tc.delay - time.Nanosecond)
			g.Expect(m.PowerState("1")).To(Equal(tc.during), "not before the delay has passed")
			clk.Step(time.Nanosecond)
			g.Expect(m.PowerState("1")).To(Equal(tc.after))
			g.Expect(log.get()).To(Equal(tc.wantChanges), "hooks hear every step, without anyone reading the state")
			g.Expect(m.PowerState("2")).To(Equal(redfishmock.PowerOn), "other systems are untouched")
			g.Expect(m.Resets("1")).To(Equal([]string{tc.resetType}))
		})
	}
}

func TestResetTypes(t *testing.T) {
	g := NewWithT(t)
	m := start(t, redfishmock.New().WithSystems(1).WithResetTypes("On", "ForceOff"))

	sys := send(t, http.DefaultClient, m.URL(), admin("GET", "/redfish/v1/Systems/1", ""))
	g.Expect(sys.json["Actions"]).To(HaveKeyWithValue("#ComputerSystem.Reset",
		HaveKeyWithValue("ResetType@Redfish.AllowableValues", ConsistOf("On", "ForceOff"))))
	g.Expect(send(t, http.DefaultClient, m.URL(), admin("POST", resetPath, resetBody("GracefulShutdown"))).status).To(Equal(http.StatusBadRequest))
	g.Expect(send(t, http.DefaultClient, m.URL(), admin("POST", resetPath, resetBody("ForceOff"))).status).To(Equal(http.StatusNoContent))
	g.Expect(m.Resets("1")).To(Equal([]string{"ForceOff"}), "only accepted resets count")

	_, err := redfishmock.New().WithResetTypes("Explode").Start()
	g.Expect(err).To(MatchError(ContainSubstring("Explode")))
}

func TestResetDuringTransition(t *testing.T) {
	g := NewWithT(t)
	clk := fakeClock()
	m := start(t, redfishmock.New().WithSystems(1).WithClock(clk).WithPowerDelay(10*time.Second))
	var log powerLog
	m.OnPowerChange(log.hook)

	send(t, http.DefaultClient, m.URL(), admin("POST", resetPath, resetBody("ForceOff")))
	clk.Step(5 * time.Second)
	send(t, http.DefaultClient, m.URL(), admin("POST", resetPath, resetBody("On")))
	g.Expect(m.PowerState("1")).To(Equal(redfishmock.PoweringOn))

	clk.Step(5 * time.Second) // the ForceOff's deadline: it was superseded
	g.Expect(m.PowerState("1")).To(Equal(redfishmock.PoweringOn))
	clk.Step(5 * time.Second)
	g.Expect(m.PowerState("1")).To(Equal(redfishmock.PowerOn))
	g.Expect(log.get()).To(Equal([]string{"1:On->PoweringOff", "1:PoweringOff->PoweringOn", "1:PoweringOn->On"}))
}

func TestSetPowerState(t *testing.T) {
	g := NewWithT(t)
	m := start(t, redfishmock.New().WithSystems(1).WithPowerDelay(time.Hour))
	var log powerLog
	m.OnPowerChange(log.hook)

	g.Expect(m.SetPowerState("1", redfishmock.PowerOff)).To(Succeed())
	g.Expect(m.PowerState("1")).To(Equal(redfishmock.PowerOff), "setting by hand takes no time")
	g.Expect(log.get()).To(Equal([]string{"1:On->Off"}))
	g.Expect(m.SetPowerState("1", redfishmock.PoweringOn)).NotTo(Succeed())
	g.Expect(m.SetPowerState("9", redfishmock.PowerOn)).To(MatchError(redfishmock.ErrNoSuchSystem))
	_, err := m.PowerState("9")
	g.Expect(err).To(MatchError(redfishmock.ErrNoSuchSystem))
}

// The host behind a system answers the resets its BMC only passes on: a graceful shutdown it may ignore,
// and an NMI after which it may dump its kernel and power off, or reboot, on its own. Every reset is
// recorded, answered or ignored.
func TestHostBehaviour(t *testing.T) {
	const (
		delay = 10 * time.Second // the mock's power delay
		dump  = 30 * time.Second // the host's kernel dump
	)
	tests := map[string]struct {
		host        redfishmock.Host
		resets      []string
		after       time.Duration // how long after the resets to look
		want        redfishmock.PowerState
		wantChanges []string
	}{
		"an ignored graceful shutdown leaves the power on": {host: redfishmock.Host{IgnoreGracefulShutdown: true},
			resets: []string{"GracefulShutdown"}, after: time.Hour, want: redfishmock.PowerOn},
		"an ignored graceful restart too": {host: redfishmock.Host{IgnoreGracefulShutdown: true},
			resets: []string{"GracefulRestart"}, after: time.Hour, want: redfishmock.PowerOn},
		"a host that ignores the graceful shutdown is forced off": {host: redfishmock.Host{IgnoreGracefulShutdown: true},
			resets: []string{"GracefulShutdown", "ForceOff"}, after: delay, want: redfishmock.PowerOff,
			wantChanges: []string{"1:On->PoweringOff", "1:PoweringOff->Off"}},
		"an NMI changes nothing by default": {resets: []string{"Nmi"}, after: time.Hour, want: redfishmock.PowerOn},
		"not before the dump is written": {host: redfishmock.Host{PowerOffAfterNMI: dump},
			resets: []string{"Nmi"}, after: dump - time.Nanosecond, want: redfishmock.PowerOn},
		"a host powers itself off after its kernel dump": {host: redfishmock.Host{PowerOffAfterNMI: dump},
			resets: []string{"Nmi"}, after: dump, want: redfishmock.PoweringOff,
			wantChanges: []string{"1:On->PoweringOff"}},
		"and is off once the power delay has passed": {host: redfishmock.Host{PowerOffAfterNMI: dump},
			resets: []string{"Nmi"}, after: dump + delay, want: redfishmock.PowerOff,
			wantChanges: []string{"1:On->PoweringOff", "1:PoweringOff->Off"}},
		"a second NMI does not restart the dump": {host: redfishmock.Host{PowerOffAfterNMI: dump},
			resets: []string{"Nmi", "Nmi"}, after: dump + delay, want: redfishmock.PowerOff,
			wantChanges: []string{"1:On->PoweringOff", "1:PoweringOff->Off"}},
		"a host reboots after its kernel dump": {host: redfishmock.Host{RebootAfterNMI: dump},
			resets: []string{"Nmi"}, after: dump + delay, want: redfishmock.PowerOn,
			wantChanges: []string{"1:On->Off", "1:Off->PoweringOn", "1:PoweringOn->On"}},
		"a forced power-off ends the dump": {host: redfishmock.Host{PowerOffAfterNMI: dump},
			resets: []string{"Nmi", "ForceOff", "On"}, after: dump + delay, want: redfishmock.PowerOn,
			wantChanges: []string{"1:On->PoweringOff", "1:PoweringOff->PoweringOn", "1:PoweringOn->On"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			clk := fakeClock()
			m := start(t, redfishmock.New().WithSystems(2).WithClock(clk).WithPowerDelay(delay))
			g.Expect(m.SetHost("1", tc.host)).To(Succeed())
			var log powerLog
			m.OnPowerChange(log.hook)

			for _, r := range tc.resets {
				g.Expect(send(t, http.DefaultClient, m.URL(), admin("POST", resetPath, resetBody(r))).status).To(Equal(http.StatusNoContent))
			}
			clk.Step(tc.after)
			g.Expect(log.get()).To(Equal(tc.wantChanges), "hooks hear every step, without anyone reading the state")
			g.Expect(m.PowerState("1")).To(Equal(tc.want))
			g.Expect(m.Resets("1")).To(Equal(tc.resets), "every reset is recorded, whatever the host made of it")
			g.Expect(m.PowerState("2")).To(Equal(redfishmock.PowerOn), "other systems are untouched")
		})
	}
}

func TestHostConfiguration(t *testing.T) {
	g := NewWithT(t)
	dumpThenOff := redfishmock.Host{PowerOffAfterNMI: time.Minute}
	m := start(t, redfishmock.New().WithSystems(1).WithHost(dumpThenOff))
	g.Expect(m.AddSystems("later")).To(Succeed())
	g.Expect(m.Host("1")).To(Equal(dumpThenOff))
	g.Expect(m.Host("later")).To(Equal(dumpThenOff), "systems added later get the same host")

	g.Expect(m.SetHost("1", redfishmock.Host{PowerOffAfterNMI: time.Minute, RebootAfterNMI: time.Minute})).
		To(MatchError(ContainSubstring("exclude each other")))
	g.Expect(m.SetHost("9", redfishmock.Host{})).To(MatchError(redfishmock.ErrNoSuchSystem))
	_, err := redfishmock.New().WithHost(redfishmock.Host{RebootAfterNMI: -time.Second}).Start()
	g.Expect(err).To(MatchError(ContainSubstring("negative")))

	sys := send(t, http.DefaultClient, m.URL(), admin("GET", "/redfish/v1/Systems/1", ""))
	g.Expect(sys.json["Actions"]).To(HaveKeyWithValue("#ComputerSystem.Reset",
		HaveKeyWithValue("ResetType@Redfish.AllowableValues", ContainElements("GracefulShutdown", "Nmi"))),
		"graceful shutdown and NMI are advertised")
}
