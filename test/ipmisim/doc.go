// Package ipmisim runs a real IPMI BMC for tests: OpenIPMI's ipmi_sim, listening for IPMI v2.0 (lanplus)
// on a free UDP port of 127.0.0.1, with one administrator account.
//
// The simulated host is a process: ipmi_sim starts it on power on and kills it on power off, so a test
// can check what really happened (Sim.HostPoweredOn) independently of what IPMI reports. Every
// simulator is stopped, with its host, when the test ends. With ACPI the host is also connected to the
// simulator's system interface, as a virtual machine is: it can then be asked to shut down (chassis power
// soft), and may ignore it, and every command it gets is recorded (Sim.HostCommands). ipmi_sim refuses
// every diagnostic interrupt (chassis power diag), whatever the host.
//
// It needs the ipmi_sim and ipmitool binaries (Debian/Ubuntu: apt-get install openipmi ipmitool); a test
// that starts a simulator fails, with that advice, when they are missing.
package ipmisim
