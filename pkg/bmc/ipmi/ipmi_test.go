package ipmi_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/metalheal/metalheal/pkg/bmc"
	"github.com/metalheal/metalheal/pkg/bmc/ipmi"
	"github.com/metalheal/metalheal/test/ipmisim"
)

// powerWait bounds how long the simulator takes to kill or start its host (poweroff_wait is 1s).
const powerWait = 10 * time.Second

func newDriver(g Gomega, address string, creds bmc.Credentials) bmc.Driver {
	addr, err := bmc.ParseAddress(address)
	g.Expect(err).NotTo(HaveOccurred())
	d, err := ipmi.New(addr, creds, bmc.Options{RequestTimeout: 20 * time.Second})
	g.Expect(err).NotTo(HaveOccurred())
	return d
}

func TestPowerCycleAgainstSimulator(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	sim := ipmisim.Start(t)
	d := newDriver(g, sim.Address, sim.Credentials)
	powerState := func() (bmc.PowerState, error) { return d.PowerState(ctx) }

	g.Expect(d.PowerState(ctx)).To(Equal(bmc.PowerStateOn))
	g.Expect(sim.HostPoweredOn()).To(BeTrue())

	g.Expect(d.PowerOff(ctx, true)).To(Succeed())
	g.Eventually(sim.HostPoweredOn).WithTimeout(powerWait).WithPolling(100 * time.Millisecond).Should(BeFalse())
	g.Eventually(powerState).WithTimeout(powerWait).WithPolling(100 * time.Millisecond).Should(Equal(bmc.PowerStateOff))
	g.Expect(d.PowerOff(ctx, true)).To(Succeed(), "powering off a host that is off succeeds")
	g.Expect(d.PowerOff(ctx, false)).To(Succeed(), "so does a soft power off")

	g.Expect(d.PowerOn(ctx)).To(Succeed())
	g.Eventually(sim.HostPoweredOn).WithTimeout(powerWait).WithPolling(100 * time.Millisecond).Should(BeTrue())
	g.Expect(d.PowerState(ctx)).To(Equal(bmc.PowerStateOn))
	g.Expect(d.PowerOn(ctx)).To(Succeed(), "powering on a host that is on succeeds")
	g.Expect(sim.HostPoweredOn()).To(BeTrue())
	g.Expect(d.Close(ctx)).To(Succeed())
}

func TestPowerOnFromOff(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	sim := ipmisim.Start(t, ipmisim.PoweredOff())
	d := newDriver(g, sim.Address, sim.Credentials)

	g.Expect(d.PowerState(ctx)).To(Equal(bmc.PowerStateOff))
	g.Expect(d.PowerOn(ctx)).To(Succeed())
	g.Eventually(sim.HostPoweredOn).WithTimeout(powerWait).WithPolling(100 * time.Millisecond).Should(BeTrue())
	g.Expect(d.PowerState(ctx)).To(Equal(bmc.PowerStateOn))
}

func TestIPv6(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	sim := ipmisim.Start(t, ipmisim.IPv6())
	g.Expect(sim.Address).To(HavePrefix("ipmi://[::1]:"))
	d := newDriver(g, sim.Address, sim.Credentials)

	g.Expect(d.PowerState(ctx)).To(Equal(bmc.PowerStateOn))
	g.Expect(d.PowerOff(ctx, true)).To(Succeed())
	g.Eventually(sim.HostPoweredOn).WithTimeout(powerWait).WithPolling(100 * time.Millisecond).Should(BeFalse())
}

func TestSoftPowerOffRefusedBySimulator(t *testing.T) {
	// ipmi_sim can only ask a connected VM to shut down; with none it refuses the soft power off. The
	// driver must say so (ErrUnsupported) rather than pretend, and the host must stay on.
	g := NewWithT(t)
	sim := ipmisim.Start(t)
	d := newDriver(g, sim.Address, sim.Credentials)

	err := d.PowerOff(context.Background(), false)
	g.Expect(err).To(MatchError(bmc.ErrUnsupported))
	g.Expect(err).To(MatchError(ContainSubstring("ipmi PowerOff")))
	g.Expect(sim.HostPoweredOn()).To(BeTrue())
}

func TestErrors(t *testing.T) {
	sim := ipmisim.Start(t)
	for _, tc := range []struct {
		name     string
		address  string
		creds    bmc.Credentials
		timeout  time.Duration
		wantKind []error
	}{
		{
			name:     "wrong password",
			address:  sim.Address,
			creds:    bmc.Credentials{Username: ipmisim.Username, Password: "not-the-password"},
			wantKind: []error{bmc.ErrAuthentication},
		},
		{
			name:     "unknown user",
			address:  sim.Address,
			creds:    bmc.Credentials{Username: "mallory", Password: ipmisim.Password},
			wantKind: []error{bmc.ErrAuthentication},
		},
		{
			name:     "nobody listening",
			address:  "ipmi://127.0.0.1:" + strconv.Itoa(freeUDPPort(t)),
			creds:    sim.Credentials,
			timeout:  2 * time.Second,
			wantKind: []error{bmc.ErrUnreachable, bmc.ErrTimeout},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			d := newDriver(g, tc.address, tc.creds)
			ctx := context.Background()
			if tc.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.timeout)
				defer cancel()
			}
			done := make(chan error, 1)
			go func() {
				_, err := d.PowerState(ctx)
				done <- err
			}()
			var err error
			g.Eventually(done).WithTimeout(tc.timeout+5*time.Second).Should(Receive(&err), "the driver must return within the deadline")
			g.Expect(bmcKinds(err)).To(ContainElement(BeElementOf(tc.wantKind)), "got %v", err)
			g.Expect(err.Error()).NotTo(ContainSubstring(tc.creds.Password))
		})
	}
}

func TestNewWithoutIpmitool(t *testing.T) {
	g := NewWithT(t)
	t.Setenv("PATH", t.TempDir())
	addr, err := bmc.ParseAddress("ipmi://10.0.0.1")
	g.Expect(err).NotTo(HaveOccurred())
	_, err = ipmi.New(addr, bmc.Credentials{Username: "u", Password: "p"}, bmc.Options{})
	g.Expect(err).To(MatchError(bmc.ErrUnsupported))
	g.Expect(err).To(MatchError(ContainSubstring("ipmitool not found in PATH; install the ipmitool package")))
}

func TestNewRefusesOtherDrivers(t *testing.T) {
	g := NewWithT(t)
	addr, err := bmc.ParseAddress("redfish://10.0.0.1")
	g.Expect(err).NotTo(HaveOccurred())
	_, err = ipmi.New(addr, bmc.Credentials{}, bmc.Options{})
	g.Expect(err).To(MatchError(bmc.ErrUnsupported))
}

func TestPing(t *testing.T) {
	g := NewWithT(t)
	sim := ipmisim.Start(t)
	addr, err := bmc.ParseAddress(sim.Address)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ipmi.Ping(context.Background(), addr.HostPort())).To(Succeed())

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	g.Expect(ipmi.Ping(ctx, net.JoinHostPort("127.0.0.1", strconv.Itoa(freeUDPPort(t))))).NotTo(Succeed())
}

// bmcKinds returns the sentinel kinds err matches.
func bmcKinds(err error) []error {
	var kinds []error
	for _, k := range []error{bmc.ErrUnreachable, bmc.ErrAuthentication, bmc.ErrUnsupported, bmc.ErrTimeout} {
		if errors.Is(err, k) {
			kinds = append(kinds, k)
		}
	}
	return kinds
}

func freeUDPPort(t *testing.T) int {
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close() //nolint:errcheck
	return c.LocalAddr().(*net.UDPAddr).Port
}

func TestDiagnoseRefusedBySimulator(t *testing.T) {
	// ipmi_sim answers every "pulse diagnostic interrupt" (chassis control 4, ipmitool chassis power diag)
	// with "Invalid data field in request", whatever the host: the request reached the BMC, which does
	// not offer it. The driver says so (ErrUnsupported), and the host is untouched.
	g := NewWithT(t)
	sim := ipmisim.Start(t)
	d := newDriver(g, sim.Address, sim.Credentials)

	err := bmc.Diagnose(context.Background(), d)
	g.Expect(err).To(MatchError(bmc.ErrUnsupported))
	g.Expect(err).To(MatchError(ContainSubstring("ipmi Diagnose")))
	g.Expect(err).To(MatchError(ContainSubstring("Set Chassis Power Control to Diag failed: Invalid data field in request")))
	g.Expect(err.Error()).NotTo(ContainSubstring(sim.Credentials.Password))
	g.Expect(sim.HostPoweredOn()).To(BeTrue())
	g.Expect(d.PowerState(context.Background())).To(Equal(bmc.PowerStateOn))
}
