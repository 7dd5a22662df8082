// Package ipmisim runs a real IPMI BMC for tests: OpenIPMI's ipmi_sim, listening for IPMI v2.0 (lanplus)
// on a free UDP port of 127.0.0.1, with one administrator account.
//
// The simulated host is a process: ipmi_sim starts it on power on and kills it on power off, so a test
// can check what really happened (Sim.HostPoweredOn) independently of what IPMI reports. Every
// simulator is stopped, with its host, when the test ends.
//
// It needs the ipmi_sim and ipmitool binaries (Debian/Ubuntu: apt-get install openipmi ipmitool); a test
// that starts a simulator fails, with that advice, when they are missing.
package ipmisim
