package bmc

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"
)

// A BMC's hostname is looked up as written: as an absolute name, never through the search domains of the
// resolver the manager runs with. A pod's resolver (dnsPolicy ClusterFirst) has the search domains
// <namespace>.svc.cluster.local, svc.cluster.local and cluster.local with ndots 5: a name with fewer than
// five dots is first tried under each of them, so "bmc-7.example.com" would first be asked for as
// "bmc-7.example.com.svc.cluster.local" — a pod with hostname bmc-7 and subdomain example in a namespace
// named com, which anyone who may create that namespace can run. It would receive the BMC's credentials
// and could answer that a running host is off. A name with a final dot is absolute: resolvers (Go's and
// libc's alike) ask for it as written and nothing else.
//
// Only the lookup uses the absolute name. What is said to the BMC keeps the name as the address has it:
// the TLS server name and the certificate check, and the HTTP Host header (the transports take those
// from the URL, and the dialer only from the address it is asked to dial).

// AbsoluteName returns host as an absolute DNS name, with a final dot, when it is a hostname, and
// unchanged when it is an IP address or already absolute. Go's resolver still finds such a name in
// /etc/hosts (a pod's hostAliases) when it has a dot; libc's does not, so an external program (ipmitool)
// is given an address from LookupHost rather than the absolute name.
func AbsoluteName(host string) string {
	if host == "" || strings.HasSuffix(host, ".") {
		return host
	}
	if _, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return host
	}
	return host + "."
}

// dialer is the dialer of every connection to a BMC: the settings of http.DefaultTransport's.
var dialer = &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}

// LookupHost returns the address to reach host at: host itself when it is an IP address, otherwise the
// first address Go's resolver finds for the absolute name (in /etc/hosts, then DNS).
func LookupHost(ctx context.Context, host string) (netip.Addr, error) {
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip, nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", AbsoluteName(host))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("looking up the BMC's name: %w", err)
	}
	if len(ips) == 0 {
		return netip.Addr{}, fmt.Errorf("looking up the BMC's name: %s has no address", host)
	}
	return ips[0].Unmap(), nil
}

// DialContext connects to address (host:port) on network like net.Dialer.DialContext, looking the host
// up as an absolute name (see AbsoluteName). HTTP transports to BMCs use it as their DialContext; the
// request's URL, and with it the TLS server name and the Host header, keep the name as written.
func DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return dialer.DialContext(ctx, network, address)
	}
	return dialer.DialContext(ctx, network, net.JoinHostPort(AbsoluteName(host), port))
}
