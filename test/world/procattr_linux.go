package world

import "syscall"

// childProcAttr makes a child process die with the process that started it, so a test binary killed by
// its timeout leaves no controller-manager behind.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
