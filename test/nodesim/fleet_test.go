package nodesim

import (
	"errors"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// testTiming: boot 5s, lease every 10s, status every 305s, retry after 1s.
var testTiming = timing{bootDelay: 5 * time.Second, leaseInterval: 10 * time.Second, statusInterval: 305 * time.Second, retryInterval: time.Second}

// step does something to the fleet at an instant.
type step struct {
	at time.Duration
	do func(g Gomega, f *fleet)
}

func power(on bool) func(Gomega, *fleet) {
	return func(g Gomega, f *fleet) { g.Expect(f.setPower("n1", on)).To(BeTrue()) }
}

func inject(fault Fault) func(Gomega, *fleet) {
	return func(g Gomega, f *fleet) { g.Expect(f.inject("n1", fault)).To(Succeed()) }
}

// drive runs a fleet with one host n1 (powered at t0 unless off) as perfect workers would (every task
// done the instant it is due, failing as fail says) through the steps until t0+until, and returns what
// was done: "kind@offset", boots with their boot ID and "+register" when they create the Node.
func drive(g Gomega, off bool, steps []step, until time.Duration, fail func(task) error) (*fleet, []string) {
	f := newFleet(testTiming, func(d time.Duration) time.Duration { return d })
	_, err := f.add(&NodeSpec{Name: "n1"}, !off)
	g.Expect(err).NotTo(HaveOccurred())
	var log []string
	now := t0
	runTo := func(end time.Time) {
		for {
			f.schedule(now)
			next, ok := f.next()
			if !ok || next.After(end) {
				break
			}
			if next.After(now) {
				now = next
			}
			for _, t := range f.pop(now) {
				entry := fmt.Sprintf("%s@%s", t.kind, t.due.Sub(t0))
				if t.kind == taskBoot {
					entry += " " + t.bootID
					if !t.registered {
						entry += " +register"
					}
				}
				log = append(log, entry)
				var err error
				if fail != nil {
					err = fail(t)
				}
				f.done(t, now, err)
			}
		}
		now = end
	}
	for _, s := range steps {
		runTo(t0.Add(s.at))
		s.do(g, f)
	}
	runTo(t0.Add(until))
	return f, log
}

func TestFleet(t *testing.T) {
	errBoom := errors.New("boom")
	tests := map[string]struct {
		off       bool // n1 starts without power
		steps     []step
		until     time.Duration
		fail      func(task) error
		want      []string
		wantState State
	}{
		"a powered host registers at once and renews its lease every interval": {
			until:     35 * time.Second,
			want:      []string{"boot@0s n1-boot-1 +register", "lease@10s", "lease@20s", "lease@30s"},
			wantState: StateRunning,
		},
		"the status is posted every status interval": {
			until:     305 * time.Second,
			want:      append(append([]string{"boot@0s n1-boot-1 +register"}, leases(10, 300)...), "status@5m5s"),
			wantState: StateRunning,
		},
		"a host added without power registers when it first boots": {
			off:       true,
			steps:     []step{{at: 20 * time.Second, do: power(true)}},
			until:     36 * time.Second,
			want:      []string{"boot@25s n1-boot-1 +register", "lease@35s"},
			wantState: StateRunning,
		},
		"power off stops the heartbeats at once": {
			steps:     []step{{at: 15 * time.Second, do: power(false)}},
			until:     120 * time.Second,
			want:      []string{"boot@0s n1-boot-1 +register", "lease@10s"},
			wantState: StateOff,
		},
		"power on boots after the boot delay with a new boot ID": {
			steps:     []step{{at: 15 * time.Second, do: power(false)}, {at: 40 * time.Second, do: power(true)}},
			until:     56 * time.Second,
			want:      []string{"boot@0s n1-boot-1 +register", "lease@10s", "boot@45s n1-boot-2", "lease@55s"},
			wantState: StateRunning,
		},
		"power restored during the boot delay restarts the boot": {
			steps: []step{
				{at: 15 * time.Second, do: power(false)}, {at: 20 * time.Second, do: power(true)},
				{at: 22 * time.Second, do: power(false)}, {at: 23 * time.Second, do: power(true)},
			},
			until:     30 * time.Second,
			want:      []string{"boot@0s n1-boot-1 +register", "lease@10s", "boot@28s n1-boot-3"},
			wantState: StateRunning,
		},
		"a transient fault hangs the kubelet until a power cycle": {
			steps: []step{
				{at: 15 * time.Second, do: inject(FaultTransient)},
				{at: 60 * time.Second, do: func(g Gomega, f *fleet) { g.Expect(f.hosts["n1"].state).To(Equal(StateHung)) }},
				{at: 60 * time.Second, do: power(false)}, {at: 61 * time.Second, do: power(true)},
			},
			until:     66 * time.Second,
			want:      []string{"boot@0s n1-boot-1 +register", "lease@10s", "boot@1m6s n1-boot-2"},
			wantState: StateRunning,
		},
		"a transient fault injected while off hangs the next boot": {
			steps: []step{
				{at: 15 * time.Second, do: power(false)}, {at: 16 * time.Second, do: inject(FaultTransient)},
				{at: 20 * time.Second, do: power(true)},
			},
			until:     60 * time.Second,
			want:      []string{"boot@0s n1-boot-1 +register", "lease@10s"},
			wantState: StateHung,
		},
		"clearing a transient fault resumes the kubelet at once, without a reboot": {
			steps:     []step{{at: 15 * time.Second, do: inject(FaultTransient)}, {at: 50 * time.Second, do: inject(FaultNone)}},
			until:     60 * time.Second,
			want:      []string{"boot@0s n1-boot-1 +register", "lease@10s", "boot@50s n1-boot-1", "lease@1m0s"},
			wantState: StateRunning,
		},
		"a persistent fault survives power cycles": {
			steps: []step{
				{at: 15 * time.Second, do: inject(FaultPersistent)},
				{at: 30 * time.Second, do: power(false)}, {at: 31 * time.Second, do: power(true)},
			},
			until:     120 * time.Second,
			want:      []string{"boot@0s n1-boot-1 +register", "lease@10s"},
			wantState: StateBroken,
		},
		"clearing a persistent fault boots the host after the boot delay": {
			steps: []step{
				{at: 15 * time.Second, do: inject(FaultPersistent)},
				{at: 30 * time.Second, do: power(false)}, {at: 31 * time.Second, do: power(true)},
				{at: 40 * time.Second, do: inject(FaultNone)},
			},
			until:     45 * time.Second,
			want:      []string{"boot@0s n1-boot-1 +register", "lease@10s", "boot@45s n1-boot-2"},
			wantState: StateRunning,
		},
		"a failed call is retried after the retry interval": {
			until: 22 * time.Second,
			fail: func(t task) error {
				if t.kind == taskLease && t.due.Equal(t0.Add(10*time.Second)) {
					return errBoom
				}
				return nil
			},
			want:      []string{"boot@0s n1-boot-1 +register", "lease@10s", "lease@11s", "lease@21s"},
			wantState: StateRunning,
		},
		"a failed boot is retried": {
			until: 12 * time.Second,
			fail: func(t task) error {
				if t.kind == taskBoot && t.due.Equal(t0) {
					return errBoom
				}
				return nil
			},
			want:      []string{"boot@0s n1-boot-1 +register", "boot@1s n1-boot-1 +register", "lease@11s"},
			wantState: StateRunning,
		},
		"a deleted node silences the kubelet until its host boots again, which registers it": {
			steps: []step{{at: 30 * time.Second, do: power(false)}, {at: 40 * time.Second, do: power(true)}},
			until: 46 * time.Second,
			fail: func(t task) error {
				if t.kind == taskLease {
					return errNodeGone
				}
				return nil
			},
			want:      []string{"boot@0s n1-boot-1 +register", "lease@10s", "boot@45s n1-boot-2 +register"},
			wantState: StateRunning,
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			f, log := drive(g, tt.off, tt.steps, tt.until, tt.fail)
			g.Expect(log).To(Equal(tt.want))
			g.Expect(f.hosts["n1"].state).To(Equal(tt.wantState))
		})
	}
}

// leases lists lease renewals every 10s from first to last seconds.
func leases(first, last int) []string {
	var out []string
	for s := first; s <= last; s += 10 {
		out = append(out, fmt.Sprintf("lease@%s", time.Duration(s)*time.Second))
	}
	return out
}

func TestFleetDropsWorkOfAnOlderGeneration(t *testing.T) {
	g := NewWithT(t)
	f := newFleet(testTiming, func(d time.Duration) time.Duration { return d })
	_, err := f.add(&NodeSpec{Name: "n1"}, true)
	g.Expect(err).NotTo(HaveOccurred())
	f.schedule(t0)
	boot := f.pop(t0)
	g.Expect(boot).To(HaveLen(1))

	// The power goes off while the boot's API calls are under way: when they finish, nothing follows.
	g.Expect(f.setPower("n1", false)).To(BeTrue())
	g.Expect(f.done(boot[0], t0, nil)).To(BeFalse())
	g.Expect(f.hosts["n1"].state).To(Equal(StateOff))
	_, queued := f.next()
	g.Expect(queued && len(f.pop(t0.Add(time.Hour))) > 0).To(BeFalse(), "work queued for a host that is off")
}

func TestFleetRepair(t *testing.T) {
	tests := map[string]struct {
		state     State
		sinceBoot time.Duration // when the repair is asked for
		wantDue   time.Duration // when the status is posted, after boot; 0: no repair
	}{
		"a running kubelet reposts its status at once":          {state: StateRunning, sinceBoot: 30 * time.Second, wantDue: 30 * time.Second},
		"one lease interval after its last post at the soonest": {state: StateRunning, sinceBoot: 3 * time.Second, wantDue: 10 * time.Second},
		"a hung kubelet does not":                               {state: StateHung, sinceBoot: time.Minute},
		"a host that is off does not":                           {state: StateOff, sinceBoot: time.Minute},
		"a booting host does not (its boot will post)":          {state: StateBooting, sinceBoot: time.Minute},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			f := newFleet(testTiming, func(d time.Duration) time.Duration { return d })
			_, err := f.add(&NodeSpec{Name: "n1"}, true)
			g.Expect(err).NotTo(HaveOccurred())
			f.schedule(t0)
			f.done(f.pop(t0)[0], t0, nil) // booted at t0; status due at 305s
			h := f.hosts["n1"]
			h.state = tt.state
			now := t0.Add(tt.sinceBoot)
			g.Expect(f.repair("n1", now)).To(Equal(tt.wantDue != 0))
			if tt.wantDue == 0 {
				return
			}
			var status []task
			for _, t := range f.pop(t0.Add(tt.wantDue)) {
				if t.kind == taskStatus {
					status = append(status, t)
				}
			}
			g.Expect(status).To(HaveLen(1))
			g.Expect(status[0].due).To(Equal(t0.Add(tt.wantDue)))
			g.Expect(status[0].readySince.IsZero()).To(BeTrue(), "a repair makes Ready True anew")
			f.done(status[0], status[0].due, nil)
			g.Expect(h.readySince).To(Equal(status[0].due))
			g.Expect(f.repair("n1", status[0].due.Add(time.Second))).To(BeTrue())
			g.Expect(h.statusDue).To(Equal(status[0].due.Add(testTiming.leaseInterval)), "a second repair waits a lease interval")
			g.Expect(f.repair("n1", status[0].due.Add(2*time.Second))).To(BeFalse(), "a repair already queued")
		})
	}
}

func TestFleetRefusesUnknownNodesAndFaults(t *testing.T) {
	g := NewWithT(t)
	f := newFleet(testTiming, func(d time.Duration) time.Duration { return d })
	_, err := f.add(&NodeSpec{Name: "n1"}, true)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = f.add(&NodeSpec{Name: "n1"}, true)
	g.Expect(err).To(HaveOccurred(), "a node added twice")
	g.Expect(f.setPower("n2", false)).To(BeFalse())
	g.Expect(errors.Is(f.inject("n2", FaultTransient), ErrUnknownNode)).To(BeTrue())
	g.Expect(errors.Is(f.inject("n1", "Flaky"), ErrUnknownFault)).To(BeTrue())
}

func TestHostIP(t *testing.T) {
	tests := map[int]string{1: "172.16.0.1", 256: "172.16.1.0", 65536: "172.17.0.0", 5000: "172.16.19.136"}
	for index, want := range tests {
		t.Run(want, func(t *testing.T) {
			NewWithT(t).Expect(hostIP(index)).To(Equal(want))
		})
	}
}
