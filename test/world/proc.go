package world

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of CPU times in /proc/PID/stat: 100 on every Linux Go supports (Go
// cannot ask sysconf without cgo).
const clockTicks = 100

// ErrNoProcess is returned for a process that /proc does not show.
var ErrNoProcess = errors.New("no such process")

// Process is one process of the world's control plane.
type Process struct {
	// Name is the binary's name: etcd, kube-apiserver or kube-controller-manager.
	Name string
	PID  int
}

// Processes lists the world's running processes, so benchmarks can read their CPU and memory with
// ProcessUsage. Linux only: etcd and kube-apiserver are found in /proc as this process's children running
// the world's binaries and serving (etcd) or using (kube-apiserver) the world's etcd address: worlds
// started side by side (a management cluster and its workload clusters) share binaries and a parent.
func (w *World) Processes() ([]Process, error) {
	var procs []Process
	self := os.Getpid()
	own := map[string]string{ // binary → an argument only this world's process has
		"etcd":           "--listen-client-urls=" + w.EtcdURL(),
		"kube-apiserver": "--etcd-servers=" + w.EtcdURL(),
	}
	exes := map[string]string{} // binary → its path as /proc/PID/exe shows it (a bin directory of symlinks is common)
	for name := range own {
		path := filepath.Join(w.binDir, name)
		if resolved, err := filepath.EvalSymlinks(path); err == nil {
			path = resolved
		}
		exes[name] = path
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, err := parentPID(pid); err != nil || ppid != self {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil {
			continue
		}
		for name, arg := range own {
			if exe == exes[name] && hasArg(pid, arg) {
				procs = append(procs, Process{Name: name, PID: pid})
			}
		}
	}
	w.apiMu.Lock()
	kcm := w.kcm
	w.apiMu.Unlock()
	if kcm != nil && kcm.running() {
		procs = append(procs, Process{Name: "kube-controller-manager", PID: kcm.cmd.Process.Pid})
	}
	return procs, nil
}

// hasArg reports whether a process's command line holds arg.
func hasArg(pid int, arg string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	return slices.Contains(strings.Split(string(b), "\x00"), arg)
}

// Usage is what a process has consumed so far.
type Usage struct {
	// CPU is user plus system time.
	CPU time.Duration
	// RSS is the resident set size now, in bytes.
	RSS int64
	// PeakRSS is the resident set size's high-water mark, in bytes.
	PeakRSS int64
}

// ProcessUsage reads a process's CPU time and memory from /proc (Linux).
func ProcessUsage(pid int) (Usage, error) {
	fields, err := statFields(pid)
	if err != nil {
		return Usage{}, err
	}
	// After "pid (comm)": state is field 3 of proc(5), utime 14 and stime 15.
	if len(fields) < 13 {
		return Usage{}, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return Usage{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	u := Usage{CPU: time.Duration(utime+stime) * time.Second / clockTicks}

	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Usage{}, fmt.Errorf("%w: %w", ErrNoProcess, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		var dst *int64
		switch key {
		case "VmRSS":
			dst = &u.RSS
		case "VmHWM":
			dst = &u.PeakRSS
		default:
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(value), "kB")), 10, 64)
		if err != nil {
			return Usage{}, fmt.Errorf("/proc/%d/status %s: %w", pid, key, err)
		}
		*dst = kb * 1024
	}
	return u, nil
}

// parentPID reads a process's parent.
func parentPID(pid int) (int, error) {
	fields, err := statFields(pid)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(fields[1])
}

// statFields returns /proc/PID/stat's fields after "pid (comm)" (the command may hold spaces).
func statFields(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoProcess, err)
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, fmt.Errorf("/proc/%d/stat: no command", pid)
	}
	fields := strings.Fields(string(b[i+1:]))
	if len(fields) < 2 {
		return nil, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	return fields, nil
}
