package ipmisim

import (
	"fmt"
	"runtime"
	"testing"

	. "github.com/onsi/gomega"
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
