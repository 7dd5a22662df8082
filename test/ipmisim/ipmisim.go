package ipmisim

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/metalheal/metalheal/pkg/bmc"
	"github.com/metalheal/metalheal/pkg/bmc/ipmi"
)

// Credentials of the simulator's administrator.
const (
	Username = "admin"
	Password = "ipmisim-password"
)

// startTimeout bounds how long the simulator may take to answer its first ping.
const startTimeout = 10 * time.Second

// Sim is a running BMC simulator.
type Sim struct {
	// Address is the BMC's address, "ipmi://127.0.0.1:PORT" (or "ipmi://[::1]:PORT").
	Address string
	// Credentials are the administrator's.
	Credentials bmc.Credentials

	dir string
	cmd *exec.Cmd
	log *bytes.Buffer
}

// Option configures a simulator.
type Option func(*config)

type config struct {
	poweredOn bool
	ip        string
	acpi      bool // the host is connected to the system interface (see ACPI)
	ignoreOff bool // and ignores a graceful shutdown
}

// PoweredOff starts the simulator with its host powered off (the default is on).
func PoweredOff() Option { return func(c *config) { c.poweredOn = false } }

// IPv6 makes the simulator listen on [::1] instead of 127.0.0.1.
func IPv6() Option { return func(c *config) { c.ip = "::1" } }

// ACPI connects the simulated host to the simulator's system interface, as a virtual machine's link to
// its BMC is (ipmi_sim's VM protocol, which QEMU's ipmi-bmc-extern speaks), and has it say that it can be
// asked to shut down. ipmi_sim then accepts a soft power off (ipmitool chassis power soft) and passes it on
// to the host, which shuts down: its process ends, and ipmi_sim reports the power off. With
// ignoreShutdown the host, hung, ignores it. Without ACPI ipmi_sim refuses a soft power off. Either way
// every command ipmi_sim passes on is recorded (Sim.HostCommands). The host runs in bash.
//
// No option makes ipmi_sim accept a diagnostic interrupt (chassis power diag): it refuses every one
// ("Invalid data field in request") without asking the host.
func ACPI(ignoreShutdown bool) Option {
	return func(c *config) { c.acpi, c.ignoreOff = true, ignoreShutdown }
}

// Start runs a simulator for the duration of t, and fails t if it cannot.
func Start(t testing.TB, opts ...Option) *Sim {
	t.Helper()
	cfg := config{poweredOn: true, ip: "127.0.0.1"}
	for _, o := range opts {
		o(&cfg)
	}
	bins := []string{"ipmi_sim", "ipmitool"}
	if cfg.acpi {
		bins = append(bins, "bash")
	}
	for _, bin := range bins {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("ipmisim: %s not found in PATH: install the openipmi and ipmitool packages (apt-get install -y openipmi ipmitool)", bin)
		}
	}

	s := &Sim{dir: t.TempDir(), log: &bytes.Buffer{}, Credentials: bmc.Credentials{Username: Username, Password: Password}}
	lanPort, serialPort := freePort(t, "udp", cfg.ip), freePort(t, "tcp", "127.0.0.1")
	hostport := net.JoinHostPort(cfg.ip, strconv.Itoa(lanPort))
	s.Address = "ipmi://" + hostport
	host := hostScript(s.dir)
	if cfg.acpi {
		host = acpiHostScript(s.dir, serialPort, cfg.ignoreOff)
	}
	s.write(t, "host.sh", host, 0o755)
	s.write(t, "lan.conf", lanConf(s.dir, cfg.ip, lanPort, serialPort, cfg.poweredOn), 0o644)
	s.write(t, "bmc.emu", bmcEmu, 0o644)
	if err := os.Mkdir(filepath.Join(s.dir, "state"), 0o755); err != nil {
		t.Fatalf("ipmisim: %v", err)
	}

	s.cmd = exec.Command("ipmi_sim", "-n", "-c", s.path("lan.conf"), "-f", s.path("bmc.emu"), "-s", s.path("state"))
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // the host joins this group: one kill stops both
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("ipmisim: starting ipmi_sim: %v", err)
	}
	t.Cleanup(s.stop)

	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		return ipmi.Ping(ctx, hostport) == nil && s.HostPoweredOn() == cfg.poweredOn, nil
	})
	if err != nil {
		t.Fatalf("ipmisim: the simulator did not come up within %s: %v\n%s", startTimeout, err, s.log)
	}
	return s
}

// HostPoweredOn reports whether the simulated host is running, as seen from the operating system.
func (s *Sim) HostPoweredOn() bool {
	b, err := os.ReadFile(s.path("host.pid"))
	if err != nil {
		return false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return false
	}
	// /proc/PID/stat is "PID (comm) STATE ...": a killed host is gone, or a zombie until ipmi_sim reaps it.
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z" && fields[0] != "X"
}

// CutPower kills the simulated host's process at once, as a power loss the BMC did not cause (a pulled
// plug, a tripped breaker): ipmi_sim sees its host gone and reports the chassis power off.
func (s *Sim) CutPower() error {
	b, err := os.ReadFile(s.path("host.pid"))
	if err != nil {
		return fmt.Errorf("ipmisim: the host runs not: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("ipmisim: host.pid: %w", err)
	}
	return syscall.Kill(pid, syscall.SIGKILL)
}

// HostCommands lists the commands ipmi_sim passed on to the host through the system interface, oldest
// first, each time the host was on: "graceful-shutdown", "power-off", "nmi", "reset", or "0xNN" for
// another. Only a host connected to the system interface (see ACPI) receives any.
func (s *Sim) HostCommands() []string {
	b, err := os.ReadFile(s.path("host.log"))
	if err != nil {
		return nil
	}
	return strings.Fields(string(b))
}

// Log returns what ipmi_sim printed so far, for failure messages.
func (s *Sim) Log() string { return s.log.String() }

func (s *Sim) stop() {
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	_ = s.cmd.Wait()
}

func (s *Sim) path(name string) string { return filepath.Join(s.dir, name) }

func (s *Sim) write(t testing.TB, name, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(s.path(name), []byte(content), mode); err != nil {
		t.Fatalf("ipmisim: %v", err)
	}
}

// freePort returns a port of ip that was free a moment ago.
func freePort(t testing.TB, network, ip string) int {
	t.Helper()
	if network == "udp" {
		c, err := net.ListenPacket("udp", net.JoinHostPort(ip, "0"))
		if err != nil {
			t.Fatalf("ipmisim: %v", err)
		}
		defer c.Close() //nolint:errcheck
		return c.LocalAddr().(*net.UDPAddr).Port
	}
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatalf("ipmisim: %v", err)
	}
	defer l.Close() //nolint:errcheck
	return l.Addr().(*net.TCPAddr).Port
}

// hostScript stands for the host: it runs while the host is powered on.
func hostScript(dir string) string {
	return fmt.Sprintf("#!/bin/sh\necho $$ > %s/host.pid\nexec sleep infinity\n", dir)
}

// acpiHostScript stands for a host connected to the simulator's system interface (the "serial 15 ...
// codec VM" channel of lanConf) as a virtual machine is: it runs while the host is powered on, tells
// ipmi_sim which commands it takes (power, graceful shutdown), logs each command ipmi_sim passes on, and
// ends on a power-off and, unless ignoreShutdown, on a graceful shutdown. The protocol: each command is
// its bytes followed by 0xA1 (messages, which it ignores, end in 0xA0); 0xFF 0x01 is the protocol version,
// 0x08 the capabilities (0x01 power, 0x20 graceful shutdown), 0x03 power off, 0x04 reset, 0x07 NMI,
// 0x09 graceful shutdown.
func acpiHostScript(dir string, serialPort int, ignoreShutdown bool) string {
	onShutdown := "exit 0"
	if ignoreShutdown {
		onShutdown = ":" // hung: it carries on
	}
	return fmt.Sprintf(`#!/bin/bash
export LC_ALL=C
dir=%[1]q
echo $$ > "$dir/host.pid"
for try in $(seq 100); do
  if exec 3<>/dev/tcp/127.0.0.1/%[2]d; then break; fi
  sleep 0.1
done
printf 'ÿ¡!¡' >&3
cmd=
while IFS= read -r -d '' -n 1 c <&3; do
  if [ -z "$c" ]; then b=00; else printf -v b '%%02x' "'$c"; fi
  case "$b" in
  a0) cmd= ;;
  a1)
    case "$cmd" in
    03) echo power-off >> "$dir/host.log"; exit 0 ;;
    04) echo reset >> "$dir/host.log" ;;
    07) echo nmi >> "$dir/host.log" ;;
    09) echo graceful-shutdown >> "$dir/host.log"; %[3]s ;;
    ff01|00|01|02|05|06) ;;
    *) echo "0x$cmd" >> "$dir/host.log" ;;
    esac
    cmd= ;;
  *) cmd="$cmd$b" ;;
  esac
done
`, dir, serialPort, onShutdown)
}

// lanConf configures one LAN channel on ip and the administrator. The "serial 15 ... codec VM"
// line is required: without it ipmi_sim refuses every chassis power command ("Invalid data field in
// request"). poweroff_wait is the grace period before the host is sent SIGTERM on power off.
func lanConf(dir, ip string, lanPort, serialPort int, poweredOn bool) string {
	return fmt.Sprintf(`name "ipmisim"
set_working_mc 0x20
  startlan 1
    addr %s %d
    priv_limit admin
    allowed_auths_callback none md2 md5 straight
    allowed_auths_user none md2 md5 straight
    allowed_auths_operator none md2 md5 straight
    allowed_auths_admin none md2 md5 straight
    guid a123456789abcdefa123456789abcdef
  endlan
  serial 15 127.0.0.1 %d codec VM
  startcmd "%s/host.sh"
  startnow %t
  poweroff_wait 1
  kill_wait 1
user 2 true "%s" "%s" admin 10 none md2 md5 straight
`, ip, lanPort, serialPort, dir, poweredOn, Username, Password)
}

// bmcEmu declares the BMC itself: management controller 0x20.
const bmcEmu = `mc_setbmc 0x20
mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02 persist_sdr
mc_enable 0x20
`
