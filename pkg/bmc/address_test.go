package bmc

import (
	"errors"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

func TestParseAddress(t *testing.T) {
	redfish := func(scheme, transport, host, port, path string) Address {
		return Address{Driver: DriverRedfish, Scheme: scheme, Host: host, Port: port, Path: path, Transport: transport}
	}
	ipmi := func(scheme, host, port string) Address {
		return Address{Driver: DriverIPMI, Scheme: scheme, Host: host, Port: port}
	}
	ironic := func(scheme, transport, host, port, node string) Address {
		return Address{Driver: DriverIronic, Scheme: scheme, Host: host, Port: port, Path: "/" + node, Transport: transport}
	}
	const node = "1be26c0b-03f2-4d2e-ae87-c02d7f33c123"

	for _, tc := range []struct {
		name    string
		address string
		want    Address
		// wantErr is a substring of the AddressError's reason; empty means success is expected.
		wantErr       string
		unknownScheme string
	}{
		// metal3's TestParse cases that apply to our drivers.
		{name: "bare IPv4 means ipmi with the default port", address: "192.168.122.1", want: ipmi("ipmi", "192.168.122.1", "623")},
		{name: "bare hostname means ipmi", address: "my.favoritebmc.com", want: ipmi("ipmi", "my.favoritebmc.com", "623")},
		{name: "invalid dns hostname", address: "my-.examplehost.com", wantErr: "not a valid hostname"},
		{name: "invalid bracketed ipv6", address: "[fe80::fc33:62ff:fe33:8xff]:6223", wantErr: "not a valid"},
		{name: "bare host and port", address: "192.168.122.1:6233", want: ipmi("ipmi", "192.168.122.1", "6233")},
		{name: "bare ipv6 host and port", address: "[fe80::fc33:62ff:fe83:8a76]:6233", want: ipmi("ipmi", "fe80::fc33:62ff:fe83:8a76", "6233")},
		{name: "ipmi full url", address: "ipmi://192.168.122.1:6233", want: ipmi("ipmi", "192.168.122.1", "6233")},
		{name: "ipmi url without slashes", address: "ipmi:192.168.122.1", want: ipmi("ipmi", "192.168.122.1", "623")},
		{name: "ipmi url with port, without slashes", address: "ipmi:192.168.122.1:6233", want: ipmi("ipmi", "192.168.122.1", "6233")},
		{name: "redfish url", address: "redfish://192.168.122.1", want: redfish("redfish", "https", "192.168.122.1", "443", "")},
		{name: "redfish url ipv6", address: "redfish://[fe80::fc33:62ff:fe83:8a76]", want: redfish("redfish", "https", "fe80::fc33:62ff:fe83:8a76", "443", "")},
		{name: "redfish url without slashes", address: "redfish:192.168.122.1", want: redfish("redfish", "https", "192.168.122.1", "443", "")},
		{name: "redfish path that is no system", address: "redfish://192.168.122.1:6233/foo", wantErr: "must be empty or a Redfish system"},
		{name: "libvirt is not ours", address: "libvirt://192.168.122.1:6233/", unknownScheme: "libvirt"},

		// Redfish and its aliases.
		{name: "redfish with system path", address: "redfish://bmc.example.com/redfish/v1/Systems/System.Embedded.1", want: redfish("redfish", "https", "bmc.example.com", "443", "/redfish/v1/Systems/System.Embedded.1")},
		{name: "redfish ipv6 with port and system", address: "redfish://[fe80::fc33:62ff:fe83:8a76]:8000/redfish/v1/Systems/1", want: redfish("redfish", "https", "fe80::fc33:62ff:fe83:8a76", "8000", "/redfish/v1/Systems/1")},
		{name: "redfish trailing slash on system path", address: "redfish://10.0.0.1/redfish/v1/Systems/1/", want: redfish("redfish", "https", "10.0.0.1", "443", "/redfish/v1/Systems/1")},
		{name: "redfish service root means no system", address: "redfish+https://10.0.0.1/redfish/v1/", want: redfish("redfish+https", "https", "10.0.0.1", "443", "")},
		{name: "redfish bare slash", address: "redfish://10.0.0.1/", want: redfish("redfish", "https", "10.0.0.1", "443", "")},
		{name: "redfish+http defaults to port 80", address: "redfish+http://10.0.0.1/redfish/v1/Systems/1", want: redfish("redfish+http", "http", "10.0.0.1", "80", "/redfish/v1/Systems/1")},
		{name: "idrac-redfish is redfish over https", address: "idrac-redfish://10.0.0.1/redfish/v1/Systems/System.Embedded.1", want: redfish("idrac-redfish", "https", "10.0.0.1", "443", "/redfish/v1/Systems/System.Embedded.1")},
		{name: "idrac-redfish+http", address: "idrac-redfish+http://10.0.0.1:8080", want: redfish("idrac-redfish+http", "http", "10.0.0.1", "8080", "")},
		{name: "ilo5-redfish", address: "ilo5-redfish://ilo.example.com/redfish/v1/Systems/1", want: redfish("ilo5-redfish", "https", "ilo.example.com", "443", "/redfish/v1/Systems/1")},
		{name: "ilo5-redfish+https", address: "ilo5-redfish+https://ilo.example.com", want: redfish("ilo5-redfish+https", "https", "ilo.example.com", "443", "")},
		{name: "redfish systems collection without id", address: "redfish://10.0.0.1/redfish/v1/Systems/", wantErr: "must be empty or a Redfish system"},
		{name: "redfish system path is case sensitive", address: "redfish://10.0.0.1/redfish/v1/systems/1", wantErr: "must be empty or a Redfish system"},
		{name: "redfish nested system path", address: "redfish://10.0.0.1/redfish/v1/Systems/1/Bios", wantErr: "must be empty or a Redfish system"},
		{name: "redfish escaped slash in system id", address: "redfish://10.0.0.1/redfish/v1/Systems/a%2Fb", wantErr: "must be empty or a Redfish system"},
		{name: "redfish with a query", address: "redfish://10.0.0.1/redfish/v1/Systems/1?x=y", wantErr: "query parameters"},
		{name: "redfish with a fragment", address: "redfish://10.0.0.1/#top", wantErr: "fragments"},
		{name: "virtual media flavours are not ours", address: "redfish-virtualmedia://10.0.0.1", unknownScheme: "redfish-virtualmedia"},

		// IPMI.
		{name: "ipmi default port", address: "ipmi://10.0.0.1", want: ipmi("ipmi", "10.0.0.1", "623")},
		{name: "ipmi trailing slash is tolerated", address: "ipmi://10.0.0.1:623/", want: ipmi("ipmi", "10.0.0.1", "623")},
		{name: "ipmi with a path", address: "ipmi://10.0.0.1/foo", wantErr: "takes no path"},
		{name: "bare host with a path", address: "10.0.0.1:623/foo", wantErr: "takes no path"},
		{name: "bare hostname and port", address: "bmc-7.rack2.example.com:6230", want: ipmi("ipmi", "bmc-7.rack2.example.com", "6230")},
		{name: "ipmi leading zeros in the port are normalised", address: "ipmi://10.0.0.1:0623", want: ipmi("ipmi", "10.0.0.1", "623")},

		// Ironic.
		{name: "ironic node", address: "ironic://ironic.example.com:6385/" + node, want: ironic("ironic", "http", "ironic.example.com", "6385", node)},
		{name: "ironic default port", address: "ironic://10.0.0.5/" + node, want: ironic("ironic", "http", "10.0.0.5", "6385", node)},
		{name: "ironic+https", address: "ironic+https://[2001:db8::5]:6385/" + node, want: ironic("ironic+https", "https", "2001:db8::5", "6385", node)},
		{name: "ironic node by name", address: "ironic://10.0.0.5/worker-3", want: ironic("ironic", "http", "10.0.0.5", "6385", "worker-3")},
		{name: "ironic without a node", address: "ironic://10.0.0.5:6385", wantErr: "needs the node"},
		{name: "ironic with a nested path", address: "ironic://10.0.0.5:6385/v1/nodes/" + node, wantErr: "not a valid Ironic node"},

		// Hosts and ports.
		{name: "missing host", address: "redfish:///redfish/v1/Systems/1", wantErr: "host is missing"},
		{name: "missing host with port", address: "ipmi://:623", wantErr: "host is missing"},
		{name: "port zero", address: "ipmi://10.0.0.1:0", wantErr: "between 1 and 65535"},
		{name: "port too large", address: "redfish://10.0.0.1:65536", wantErr: "between 1 and 65535"},
		{name: "port not a number", address: "redfish://10.0.0.1:http", wantErr: "not a valid URL"},
		{name: "empty port", address: "ipmi://10.0.0.1:", wantErr: "port is empty"},
		{name: "largest port", address: "ipmi://10.0.0.1:65535", want: ipmi("ipmi", "10.0.0.1", "65535")},
		{name: "unbracketed ipv6", address: "fe80::1", wantErr: "must be enclosed in brackets"},
		{name: "unbracketed ipv6 in a url", address: "redfish://fe80::1/", wantErr: "not a valid"},
		{name: "bracketed ipv4", address: "ipmi://[10.0.0.1]:623", wantErr: "not a valid URL"},
		{name: "ipv6 zone", address: "ipmi://[fe80::1%25eth0]:623", wantErr: "zones are not supported"},
		{name: "ipv6 without port", address: "[fe80::1]", want: ipmi("ipmi", "fe80::1", "623")},
		{name: "out of range ipv4", address: "192.168.1.256", wantErr: "not a valid IPv4 address"},
		// An absolute hostname: the final dot is dropped (every name is looked up absolute; see AbsoluteName).
		{name: "absolute hostname", address: "redfish://bmc-7.example.com./redfish/v1/Systems/1", want: redfish("redfish", "https", "bmc-7.example.com", "443", "/redfish/v1/Systems/1")},
		{name: "absolute hostname with port", address: "ipmi://bmc-7.example.com.:6233", want: ipmi("ipmi", "bmc-7.example.com", "6233")},
		{name: "bare absolute hostname", address: "bmc-7.example.com.", want: ipmi("ipmi", "bmc-7.example.com", "623")},
		{name: "bare absolute hostname and port", address: "bmc-7.example.com.:6233", want: ipmi("ipmi", "bmc-7.example.com", "6233")},
		{name: "two final dots", address: "redfish://bmc-7.example.com../", wantErr: "not a valid hostname"},
		{name: "a dot alone", address: "redfish://./", wantErr: "the host is missing"},
		{name: "ipv4 with a final dot", address: "redfish://10.0.0.1./", wantErr: "not a valid"},
		{name: "underscore in hostname", address: "ipmi://bmc_1.example.com", wantErr: "not a valid hostname"},
		{name: "label longer than 63", address: "ipmi://" + strings.Repeat("a", 64) + ".example.com", wantErr: "not a valid hostname"},

		// Scheme spelling and whitespace.
		{name: "uppercase scheme", address: "REDFISH+HTTPS://10.0.0.1", want: redfish("redfish+https", "https", "10.0.0.1", "443", "")},
		{name: "mixed case scheme", address: "Ipmi://10.0.0.1", want: ipmi("ipmi", "10.0.0.1", "623")},
		{name: "surrounding whitespace", address: "  ipmi://10.0.0.1:623\n", want: ipmi("ipmi", "10.0.0.1", "623")},
		{name: "inner whitespace", address: "redfish://10.0.0 .1/", wantErr: "not a valid URL"},
		{name: "empty", address: "", wantErr: "empty"},
		{name: "only whitespace", address: " \t\n", wantErr: "empty"},
		{name: "missing scheme name", address: "://10.0.0.1", wantErr: "scheme"},
		{name: "unknown scheme", address: "http://10.0.0.1", unknownScheme: "http"},
		{name: "unknown scheme without slashes", address: "amt:10.0.0.1", unknownScheme: "amt"},
		{name: "embedded credentials", address: "redfish://admin:s3cret@10.0.0.1/", wantErr: "credentials must not be embedded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := ParseAddress(tc.address)
			switch {
			case tc.unknownScheme != "":
				var use *UnknownSchemeError
				g.Expect(errors.As(err, &use)).To(BeTrue(), "want *UnknownSchemeError, got %v", err)
				g.Expect(use.Scheme).To(Equal(tc.unknownScheme))
			case tc.wantErr != "":
				var ae *AddressError
				g.Expect(errors.As(err, &ae)).To(BeTrue(), "want *AddressError, got %v (parsed %+v)", err, got)
				g.Expect(ae.Reason).To(ContainSubstring(tc.wantErr))
			default:
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(got).To(Equal(tc.want))
				again, err := ParseAddress(got.String())
				g.Expect(err).NotTo(HaveOccurred(), "re-parsing %q", got.String())
				g.Expect(again).To(Equal(got))
			}
		})
	}
}

func TestAddressErrorRedactsEmbeddedCredentials(t *testing.T) {
	for _, address := range []string{
		"redfish://admin:s3cret@10.0.0.1/redfish/v1/Systems/1",
		"admin:s3cret@10.0.0.1",
		"ipmi://admin:s3c/ret@10.0.0.1",
		"ironic+https://admin:s3cret@host:6385/node",
	} {
		t.Run(address, func(t *testing.T) {
			g := NewWithT(t)
			_, err := ParseAddress(address)
			g.Expect(err).To(HaveOccurred())
			g.Expect(err.Error()).NotTo(ContainSubstring("s3c"))
			g.Expect(err.Error()).To(ContainSubstring("REDACTED@"))
		})
	}
}

func TestAddressEndpoint(t *testing.T) {
	for _, tc := range []struct {
		address      string
		wantEndpoint string
		wantHostPort string
	}{
		{address: "redfish://10.0.0.1/redfish/v1/Systems/1", wantEndpoint: "https://10.0.0.1:443", wantHostPort: "10.0.0.1:443"},
		{address: "idrac-redfish+http://[fe80::1]:8000", wantEndpoint: "http://[fe80::1]:8000", wantHostPort: "[fe80::1]:8000"},
		{address: "ironic+https://ironic.example.com/node-1", wantEndpoint: "https://ironic.example.com:6385", wantHostPort: "ironic.example.com:6385"},
		{address: "10.0.0.1", wantHostPort: "10.0.0.1:623"},
	} {
		t.Run(tc.address, func(t *testing.T) {
			g := NewWithT(t)
			a, err := ParseAddress(tc.address)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(a.HostPort()).To(Equal(tc.wantHostPort))
			if tc.wantEndpoint == "" {
				g.Expect(a.Endpoint()).To(BeNil())
				return
			}
			g.Expect(a.Endpoint().String()).To(Equal(tc.wantEndpoint))
		})
	}
}

func TestSupportedSchemesAllParse(t *testing.T) {
	g := NewWithT(t)
	schemes := SupportedSchemes()
	g.Expect(schemes).To(ContainElements("redfish", "redfish+http", "redfish+https", "idrac-redfish", "ilo5-redfish", "ipmi", "ironic", "ironic+https"))
	for _, s := range schemes {
		a, err := ParseAddress(s + "://10.0.0.1/node-1")
		if err != nil { // redfish and ipmi refuse that path; the scheme itself must still be known
			var use *UnknownSchemeError
			g.Expect(errors.As(err, &use)).To(BeFalse(), "scheme %q", s)
			continue
		}
		g.Expect(a.Scheme).To(Equal(s))
	}
}

func FuzzParseAddress(f *testing.F) {
	for _, seed := range []string{
		"192.168.122.1", "192.168.122.1:6233", "[fe80::1]:8000", "ipmi:10.0.0.1", "redfish:10.0.0.1",
		"redfish://10.0.0.1/redfish/v1/Systems/1", "redfish+http://h:80/", "idrac-redfish+https://[::1]",
		"ilo5-redfish://ilo/redfish/v1/Systems/1", "ironic://ironic:6385/1be26c0b-03f2-4d2e-ae87-c02d7f33c123",
		"ironic+https://[2001:db8::1]/node", "REDFISH://X", " ipmi://a.b.c:0623 ", "ipmi://[fe80::1%25eth0]",
		"redfish://u:p@h/", "ipmi://h:/", "redfish://h/redfish/v1/Systems/%41", "://", "a:b:c", "[::ffff:1.2.3.4]",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseAddress(s)
		if err != nil {
			var ae *AddressError
			var use *UnknownSchemeError
			if !errors.As(err, &ae) && !errors.As(err, &use) {
				t.Fatalf("ParseAddress(%q) returned an untyped error: %v", s, err)
			}
			return
		}
		if a.Driver == "" || a.Host == "" || a.Port == "" {
			t.Fatalf("ParseAddress(%q) = %+v: driver, host and port must be set", s, a)
		}
		again, err := ParseAddress(a.String())
		if err != nil {
			t.Fatalf("ParseAddress(%q) = %+v, but its String() %q does not re-parse: %v", s, a, a.String(), err)
		}
		if again != a {
			t.Fatalf("ParseAddress(%q) = %+v, re-parsed from %q as %+v", s, a, a.String(), again)
		}
	})
}

func TestAbsoluteName(t *testing.T) {
	for _, tc := range []struct{ host, want string }{
		{"bmc-7.example.com", "bmc-7.example.com."},
		{"bmc-7.example.com.", "bmc-7.example.com."},
		{"bmc7", "bmc7."},
		{"10.0.0.5", "10.0.0.5"},
		{"fd00::5", "fd00::5"},
		{"[fd00::5]", "[fd00::5]"},
		{"", ""},
	} {
		t.Run(tc.host, func(t *testing.T) {
			NewWithT(t).Expect(AbsoluteName(tc.host)).To(Equal(tc.want))
		})
	}
}
