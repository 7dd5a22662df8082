package ipmisim

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/metalheal/metalheal/pkg/bmc"
	"github.com/metalheal/metalheal/pkg/bmc/ipmi"
)

// fatalTB records Fatalf and stops the goroutine, as testing.T does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestStartFailsClearlyWithoutBinaries(t *testing.T) {
	g := NewWithT(t)
	t.Setenv("PATH", t.TempDir())
	tb := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Start(tb)
	}()
	<-done
	g.Expect(tb.msg).To(ContainSubstring("ipmi_sim not found in PATH"))
	g.Expect(tb.msg).To(ContainSubstring("apt-get install -y openipmi ipmitool"))
}

func TestCleanupStopsSimulatorAndHost(t *testing.T) {
	g := NewWithT(t)
	var sim *Sim
	t.Run("uses a simulator", func(t *testing.T) {
		sim = Start(t)
		NewWithT(t).Expect(sim.HostPoweredOn()).To(BeTrue())
	})
	g.Expect(sim.cmd.ProcessState).NotTo(BeNil(), "ipmi_sim has exited")
	g.Expect(sim.HostPoweredOn()).To(BeFalse(), "the host process was killed with it")
}

func TestStartPoweredOff(t *testing.T) {
	g := NewWithT(t)
	sim := Start(t, PoweredOff())
	g.Expect(sim.HostPoweredOn()).To(BeFalse())
	g.Expect(sim.Credentials.Username).To(Equal(Username))
}

// powerWait bounds how long the simulator takes to act on a power request (poweroff_wait is 1s).
const powerWait = 10 * time.Second

func driverOf(g Gomega, sim *Sim) bmc.Driver {
	addr, err := bmc.ParseAddress(sim.Address)
	g.Expect(err).NotTo(HaveOccurred())
	d, err := ipmi.New(addr, sim.Credentials, bmc.Options{RequestTimeout: 20 * time.Second})
	g.Expect(err).NotTo(HaveOccurred())
	return d
}

// A host connected to the system interface (ACPI) is passed the soft power off and shuts down: its
// process ends and ipmi_sim reports it off. It comes back on power on, connected again.
func TestACPIHostShutsDownWhenAsked(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	sim := Start(t, ACPI(false))
	d := driverOf(g, sim)

	g.Expect(d.PowerOff(ctx, false)).To(Succeed(), "ipmi_sim accepts chassis power soft")
	g.Eventually(sim.HostPoweredOn).WithTimeout(powerWait).WithPolling(100 * time.Millisecond).Should(BeFalse())
	g.Expect(d.PowerState(ctx)).To(Equal(bmc.PowerStateOff))
	g.Expect(sim.HostCommands()).To(Equal([]string{"graceful-shutdown"}))

	g.Expect(d.PowerOn(ctx)).To(Succeed())
	g.Eventually(sim.HostPoweredOn).WithTimeout(powerWait).WithPolling(100 * time.Millisecond).Should(BeTrue())
	g.Expect(d.PowerOff(ctx, false)).To(Succeed())
	g.Eventually(sim.HostPoweredOn).WithTimeout(powerWait).WithPolling(100 * time.Millisecond).Should(BeFalse())
	g.Expect(sim.HostCommands()).To(Equal([]string{"graceful-shutdown", "graceful-shutdown"}), "connected again after the power on")
}

// A hung host is passed the soft power off and ignores it; the forced power off reaches it too, and the
// power goes.
func TestACPIHostIgnoringShutdown(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	sim := Start(t, ACPI(true))
	d := driverOf(g, sim)

	g.Expect(d.PowerOff(ctx, false)).To(Succeed())
	g.Eventually(sim.HostCommands).WithTimeout(powerWait).WithPolling(100 * time.Millisecond).Should(Equal([]string{"graceful-shutdown"}))
	g.Expect(sim.HostPoweredOn()).To(BeTrue(), "it got the request, and carried on")
	g.Expect(d.PowerState(ctx)).To(Equal(bmc.PowerStateOn))

	g.Expect(d.PowerOff(ctx, true)).To(Succeed())
	g.Eventually(sim.HostPoweredOn).WithTimeout(powerWait).WithPolling(100 * time.Millisecond).Should(BeFalse())
	g.Expect(d.PowerState(ctx)).To(Equal(bmc.PowerStateOff))
	g.Expect(sim.HostCommands()).To(Equal([]string{"graceful-shutdown", "power-off"}))
}

// ipmi_sim refuses every diagnostic interrupt, even with a host on its system interface that could take
// an NMI: the request reaches the simulator (its answer says so) and never the host.
func TestDiagnosticInterruptIsRefused(t *testing.T) {
	g := NewWithT(t)
	sim := Start(t, ACPI(false))
	d := driverOf(g, sim)

	err := bmc.Diagnose(context.Background(), d)
	g.Expect(err).To(MatchError(bmc.ErrUnsupported))
	g.Expect(err).To(MatchError(ContainSubstring("Set Chassis Power Control to Diag failed: Invalid data field in request")))
	g.Expect(sim.HostPoweredOn()).To(BeTrue())
	g.Expect(sim.HostCommands()).To(BeEmpty())
}

// A host whose power is cut (its process killed, nothing asked of the BMC) reads off at the BMC, and comes
// back on power on.
func TestCutPower(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	sim := Start(t)
	d := driverOf(g, sim)
	g.Expect(sim.CutPower()).To(Succeed())
	g.Eventually(sim.HostPoweredOn).WithTimeout(powerWait).WithPolling(100 * time.Millisecond).Should(BeFalse())
	g.Eventually(func() (bmc.PowerState, error) { return d.PowerState(ctx) }).WithTimeout(powerWait).WithPolling(200*time.Millisecond).
		Should(Equal(bmc.PowerStateOff), "the BMC reports its host's power lost")
	g.Expect(d.PowerOn(ctx)).To(Succeed())
	g.Eventually(sim.HostPoweredOn).WithTimeout(powerWait).WithPolling(100 * time.Millisecond).Should(BeTrue())
}
