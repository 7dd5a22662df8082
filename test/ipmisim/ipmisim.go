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
}

// PoweredOff starts the simulator with its host powered off (the default is on).
func PoweredOff() Option { return func(c *config) { c.poweredOn = false } }

// IPv6 makes the simulator listen on [::1] instead of 127.0.0.1.
func IPv6() Option { return func(c *config) { c.ip = "::1" } }

// Start runs a simulator for the duration of t, and fails t if it cannot.
func Start(t testing.TB, opts ...Option) *Sim {
	t.Helper()
	cfg := config{poweredOn: true, ip: "127.0.0.1"}
	for _, o := range opts {
		o(&cfg)
	}
	for _, bin := range []string{"ipmi_sim", "ipmitool"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("ipmisim: %s not found in PATH: install the openipmi and ipmitool packages (apt-get install -y openipmi ipmitool)", bin)
		}
	}

	s := &Sim{dir: t.TempDir(), log: &bytes.Buffer{}, Credentials: bmc.Credentials{Username: Username, Password: Password}}
	lanPort, serialPort := freePort(t, "udp", cfg.ip), freePort(t, "tcp", "127.0.0.1")
	hostport := net.JoinHostPort(cfg.ip, strconv.Itoa(lanPort))
	s.Address = "ipmi://" + hostport
	s.write(t, "host.sh", hostScript(s.dir), 0o755)
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
