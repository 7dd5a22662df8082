package bmc

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Canonical driver names: what an Address's Driver holds and what a Registry dispatches on.
const (
	DriverRedfish = "redfish"
	DriverIPMI    = "ipmi"
	DriverIronic  = "ironic"
)

// Transports of the HTTP-based drivers.
const (
	TransportHTTP  = "http"
	TransportHTTPS = "https"
)

// scheme is what an address scheme stands for: the driver that serves it and, for HTTP drivers, the
// transport it uses.
type scheme struct {
	driver    string
	transport string
}

// schemes lists every accepted scheme. Vendor names (idrac-redfish, ilo5-redfish) are aliases of plain
// Redfish: power control is standard Redfish on those BMCs.
var schemes = map[string]scheme{
	"redfish":             {DriverRedfish, TransportHTTPS},
	"redfish+http":        {DriverRedfish, TransportHTTP},
	"redfish+https":       {DriverRedfish, TransportHTTPS},
	"idrac-redfish":       {DriverRedfish, TransportHTTPS},
	"idrac-redfish+http":  {DriverRedfish, TransportHTTP},
	"idrac-redfish+https": {DriverRedfish, TransportHTTPS},
	"ilo5-redfish":        {DriverRedfish, TransportHTTPS},
	"ilo5-redfish+http":   {DriverRedfish, TransportHTTP},
	"ilo5-redfish+https":  {DriverRedfish, TransportHTTPS},
	"ipmi":                {DriverIPMI, ""},
	"ironic":              {DriverIronic, TransportHTTP},
	"ironic+http":         {DriverIronic, TransportHTTP},
	"ironic+https":        {DriverIronic, TransportHTTPS},
}

// SupportedSchemes returns every address scheme ParseAddress accepts, sorted.
func SupportedSchemes() []string {
	out := make([]string, 0, len(schemes))
	for s := range schemes {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// Default ports.
const (
	defaultIPMIPort   = "623"
	defaultIronicPort = "6385"
	defaultHTTPPort   = "80"
	defaultHTTPSPort  = "443"
)

// Address is a parsed BMC address.
type Address struct {
	// Driver is the canonical driver: DriverRedfish, DriverIPMI or DriverIronic.
	Driver string
	// Scheme is the scheme as written, lowercased ("idrac-redfish+http"); "ipmi" for a bare host.
	Scheme string
	// Host is a hostname or an IP address, without brackets.
	Host string
	// Port is the port, defaulted when the address has none (443 or 80 for Redfish, 623 for IPMI,
	// 6385 for Ironic).
	Port string
	// Path is the Redfish system path ("/redfish/v1/Systems/1", or empty to use the BMC's only system)
	// or the Ironic node ("/NODE-UUID"). It is empty for IPMI.
	Path string
	// Transport is "http" or "https" for HTTP-based drivers, empty for IPMI.
	Transport string
}

// HostPort returns host:port, with an IPv6 host in brackets.
func (a Address) HostPort() string { return net.JoinHostPort(a.Host, a.Port) }

// Endpoint returns the base URL (transport, host and port, no path) of an HTTP-based BMC, or nil for
// a driver that does not speak HTTP.
func (a Address) Endpoint() *url.URL {
	if a.Transport == "" {
		return nil
	}
	return &url.URL{Scheme: a.Transport, Host: a.HostPort()}
}

// String renders the address in its canonical form, port included; ParseAddress reads it back to the
// same Address.
func (a Address) String() string {
	return (&url.URL{Scheme: a.Scheme, Host: a.HostPort(), Path: a.Path}).String()
}

// UnknownSchemeError is returned for an address whose scheme no driver serves.
type UnknownSchemeError struct {
	Scheme string
}

func (e *UnknownSchemeError) Error() string {
	return fmt.Sprintf("unknown BMC address scheme %q (supported: %s)", e.Scheme, strings.Join(SupportedSchemes(), ", "))
}

// AddressError is returned for an address that cannot be used, and says why.
type AddressError struct {
	// Address is the address as given, with anything that looks like embedded credentials redacted.
	Address string
	Reason  string
}

func (e *AddressError) Error() string {
	return fmt.Sprintf("invalid BMC address %q: %s", e.Address, e.Reason)
}

// ParseAddress parses a BMC address following metal3's conventions:
//
//	redfish://host[:port][/redfish/v1/Systems/ID]   Redfish over HTTPS (also redfish+http, redfish+https,
//	                                                idrac-redfish and ilo5-redfish with the same suffixes)
//	ipmi://host[:port], host, host:port             IPMI over LAN, port 623 by default
//	ironic://host[:port]/NODE                       an OpenStack Ironic node, HTTP by default (ironic+https)
//
// IPv6 hosts go in brackets ("[fe80::1]:623"). Surrounding whitespace is ignored; schemes are
// case-insensitive. Credentials never go in the address: they come from a Secret.
func ParseAddress(s string) (Address, error) {
	raw := strings.TrimSpace(s)
	fail := func(format string, args ...any) (Address, error) {
		return Address{}, &AddressError{Address: redactUserinfo(raw), Reason: fmt.Sprintf(format, args...)}
	}
	if raw == "" {
		return fail("the address is empty")
	}
	if strings.Contains(raw, "@") {
		return fail("credentials must not be embedded in the address; put them in the credentials Secret")
	}
	if ip, err := netip.ParseAddr(raw); err == nil && ip.Is6() {
		return fail("an IPv6 address must be enclosed in brackets, e.g. [%s]:623", raw)
	}

	name, rest := splitScheme(raw)
	if name == "" {
		return fail("the scheme before \"://\" is missing")
	}
	sch, ok := schemes[name]
	if !ok {
		return Address{}, &UnknownSchemeError{Scheme: name}
	}
	u, err := url.Parse("x://" + rest)
	if err != nil {
		// Safe to quote: the address holds no userinfo (refused above).
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fail("not a valid URL: %v", err)
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.Contains(rest, "#") {
		return fail("query parameters and fragments are not supported")
	}

	addr := Address{Driver: sch.driver, Scheme: name, Host: withoutFinalDot(u.Host, u.Hostname()), Transport: sch.transport}
	if reason := checkHost(u.Host, addr.Host); reason != "" {
		return fail("%s", reason)
	}
	if addr.Port, err = parsePort(u.Host, u.Port(), sch); err != nil {
		return fail("%v", err)
	}
	if addr.Path, err = parsePath(u.Path, sch.driver); err != nil {
		return fail("%v", err)
	}
	return addr, nil
}

// schemeToken matches an RFC 3986 scheme.
var schemeToken = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*$`)

// portSuffix matches what follows a bare host's colon: a port, possibly followed by a path.
var portSuffix = regexp.MustCompile(`^[0-9]*(/.*)?$`)

// splitScheme splits raw into its lowercased scheme and what follows "scheme://" (or metal3's
// "scheme:"). An address without a scheme (host, host:port, [v6]:port) is IPMI.
func splitScheme(raw string) (name, rest string) {
	if i := strings.Index(raw, "://"); i >= 0 {
		return strings.ToLower(raw[:i]), raw[i+3:]
	}
	if i := strings.Index(raw, ":"); i > 0 && schemeToken.MatchString(raw[:i]) && !portSuffix.MatchString(raw[i+1:]) {
		return strings.ToLower(raw[:i]), raw[i+1:]
	}
	return DriverIPMI, raw
}

// withoutFinalDot returns the hostname host (from the URL authority hostport) without the final dot of an
// absolute name ("bmc-7.example.com."). Drivers look every hostname up as an absolute name (see
// AbsoluteName), so the dot changes nothing and is dropped: one spelling per host, in the Host header and
// the TLS server name as well. An IP address is never written with one, and keeps it (to be refused).
func withoutFinalDot(hostport, host string) string {
	name, ok := strings.CutSuffix(host, ".")
	if !ok || strings.HasPrefix(hostport, "[") {
		return host
	}
	if _, err := netip.ParseAddr(name); err == nil {
		return host
	}
	return name
}

// dnsLabel is an RFC 1123 label.
var dnsLabel = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$`)

// checkHost returns why host (from the URL authority hostport) is not a usable BMC host, or "".
func checkHost(hostport, host string) string {
	bracketed := strings.HasPrefix(hostport, "[")
	if host == "" {
		return "the host is missing"
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		switch {
		case ip.Zone() != "":
			return "IPv6 zones are not supported"
		case ip.Is6() && !bracketed:
			return "an IPv6 address must be enclosed in brackets"
		case ip.Is4() && bracketed:
			return "only IPv6 addresses go in brackets"
		}
		return ""
	}
	if bracketed {
		return fmt.Sprintf("%q is not a valid IPv6 address", host)
	}
	if len(host) > 253 {
		return "the hostname is longer than 253 characters"
	}
	labels := strings.Split(host, ".")
	for _, l := range labels {
		if !dnsLabel.MatchString(l) {
			return fmt.Sprintf("%q is not a valid hostname or IP address", host)
		}
	}
	// RFC 1123 2.1: a top-level label is never all-numeric, so this was meant as an IPv4 address.
	if _, err := strconv.Atoi(labels[len(labels)-1]); err == nil {
		return fmt.Sprintf("%q is not a valid IPv4 address", host)
	}
	return ""
}

// parsePort validates the port (1-65535, canonical decimal form) or returns the scheme's default.
func parsePort(hostport, port string, sch scheme) (string, error) {
	if port == "" {
		if strings.HasSuffix(hostport, ":") {
			return "", fmt.Errorf("the port is empty")
		}
		switch {
		case sch.driver == DriverIPMI:
			return defaultIPMIPort, nil
		case sch.driver == DriverIronic:
			return defaultIronicPort, nil
		case sch.transport == TransportHTTP:
			return defaultHTTPPort, nil
		default:
			return defaultHTTPSPort, nil
		}
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("port %q is not a number between 1 and 65535", port)
	}
	return strconv.Itoa(n), nil
}

// A path segment naming a Redfish system or an Ironic node: URL-unreserved characters only.
var pathSegment = regexp.MustCompile(`^[A-Za-z0-9._~-]+$`)

const redfishSystems = "/redfish/v1/Systems/"

// parsePath validates the path for driver and returns its canonical form.
func parsePath(p, driver string) (string, error) {
	switch driver {
	case DriverIPMI:
		if p != "" && p != "/" {
			return "", fmt.Errorf("an ipmi address takes no path (got %q)", p)
		}
		return "", nil
	case DriverIronic:
		node := strings.TrimPrefix(p, "/")
		if node == "" {
			return "", fmt.Errorf("an ironic address needs the node UUID or name as its path, e.g. ironic://host:6385/NODE-UUID")
		}
		if !isSegment(node) {
			return "", fmt.Errorf("%q is not a valid Ironic node UUID or name", node)
		}
		return "/" + node, nil
	default: // Redfish
		trimmed := strings.TrimSuffix(p, "/")
		if trimmed == "" || trimmed == "/redfish/v1" {
			return "", nil // no system given: the driver uses the BMC's only system
		}
		id, ok := strings.CutPrefix(trimmed, redfishSystems)
		if !ok || !isSegment(id) {
			return "", fmt.Errorf("the path must be empty or a Redfish system such as %sSYSTEM-ID (got %q)", redfishSystems, p)
		}
		return redfishSystems + id, nil
	}
}

func isSegment(s string) bool {
	return pathSegment.MatchString(s) && s != "." && s != ".."
}

// redactUserinfo hides whatever precedes an "@" in the authority, so that an error about an address
// with embedded credentials does not repeat them.
func redactUserinfo(raw string) string {
	at := strings.LastIndex(raw, "@")
	if at < 0 {
		return raw
	}
	start := 0
	if i := strings.Index(raw, "://"); i >= 0 && i < at {
		start = i + 3
	}
	return raw[:start] + "REDACTED" + raw[at:]
}
