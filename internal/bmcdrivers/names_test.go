package bmcdrivers

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/metalheal/metalheal/internal/testca"
	"github.com/metalheal/metalheal/internal/testdns"
	"github.com/metalheal/metalheal/pkg/bmc"
	"github.com/metalheal/metalheal/pkg/bmc/ipmi"
	"github.com/metalheal/metalheal/pkg/bmc/ironic/ironictest"
	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
)

// The BMC's name, the address DNS gives it, and the address of a pod that answers for the same name
// under the cluster's search domains: hostname bmc-7, subdomain example, namespace com.
const (
	bmcName  = "bmc-7.example.com"
	rightIP  = "127.0.0.7"
	attacker = "127.0.0.66"
	ironicID = "7a1f3d0e-0000-4000-8000-000000000001"
)

var nameCreds = bmc.Credentials{Username: "admin", Password: "s3cret-bmc-password"}

// TestBMCHostnamesResolveAsWritten: seen from a namespace creator. The manager's pod resolves names
// through the cluster's search domains with ndots 5, so a BMC name with fewer than five dots would first be
// looked up inside the cluster, where a pod bmc-7 with subdomain example in a namespace named com
// answers: it would get the Redfish login or the basic-auth header, and could report a running host as
// Off, after which the remediator fences a live host. Every driver must look up the BMC's name as
// written (absolute) and reach the BMC itself, with TLS still checking the certificate against the name.
func TestBMCHostnamesResolveAsWritten(t *testing.T) {
	if !testdns.Inside() {
		testdns.Rerun(t, testdns.PodResolvConf)
		return
	}
	dns, err := testdns.Start("127.0.0.1:53", map[string]netip.Addr{
		bmcName + ".svc.cluster.local.":                  netip.MustParseAddr(attacker),
		bmcName + ".metalheal-system.svc.cluster.local.": netip.MustParseAddr(attacker),
		bmcName + ".": netip.MustParseAddr(rightIP),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dns.Close)

	siteCA, err := testca.New("site CA")
	if err != nil {
		t.Fatal(err)
	}
	otherCA, err := testca.New("the attacker's CA")
	if err != nil {
		t.Fatal(err)
	}
	// The BMC: host on. The attacker: a fake BMC that takes any credentials (here, it is simply given the
	// same) and says the host is off.
	bmcCert := certFor(t, siteCA)
	attackerCert := certFor(t, otherCA)
	right, wrong := map[string]*seen{}, map[string]*seen{}
	for _, s := range []struct {
		name string
		port string
		tls  bool
	}{{"http", "8000", false}, {"https", "8443", true}} {
		var rc, ac *tls.Certificate
		if s.tls {
			rc, ac = &bmcCert, &attackerCert
		}
		right[s.name] = serve(t, rightIP+":"+s.port, redfishBMC(t, redfishmock.PowerOn, false), rc)
		wrong[s.name] = serve(t, attacker+":"+s.port, redfishBMC(t, redfishmock.PowerOff, true), ac)
	}
	right["ironic"] = serve(t, rightIP+":6385", ironictest.NewServer(t).WithBasicAuth(nameCreds.Username, nameCreds.Password).WithNode(ironicID, ironictest.PowerOn), nil)
	wrong["ironic"] = serve(t, attacker+":6385", ironictest.NewServer(t).WithBasicAuth(nameCreds.Username, nameCreds.Password).WithNode(ironicID, ironictest.PowerOff), nil)

	reg := NewRegistry(nil)
	tests := map[string]struct {
		address string
		site    string
		opts    bmc.Options
	}{
		"redfish over http":                     {address: "redfish+http://" + bmcName + ":8000/redfish/v1/Systems/1", site: "http"},
		"redfish, certificate verified":         {address: "redfish://" + bmcName + ":8443/redfish/v1/Systems/1", site: "https", opts: bmc.Options{CABundle: siteCA.PEM}},
		"redfish, certificate verification off": {address: "redfish://" + bmcName + ":8443/redfish/v1/Systems/1", site: "https", opts: bmc.Options{DisableCertificateVerification: true}},
		"ironic, basic auth over http":          {address: "ironic://" + bmcName + ":6385/" + ironicID, site: "ironic"},
		"the address written with a final dot":  {address: "redfish+http://" + bmcName + ".:8000/redfish/v1/Systems/1", site: "http"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			dns.Forget()
			right[tc.site].forget()
			wrong[tc.site].forget()
			tc.opts.RequestTimeout = 5 * time.Second
			d, err := reg.New(tc.address, nameCreds, tc.opts)
			g.Expect(err).NotTo(HaveOccurred())
			state, err := d.PowerState(t.Context())
			_ = d.Close(t.Context())

			got := wrong[tc.site].snapshot()
			g.Expect(got.conns).To(BeZero(), "the pod answering %s.svc.cluster.local was reached (%d connections; "+
				"credentials it received: %v)", bmcName, got.conns, got.leaked)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(state).To(Equal(bmc.PowerStateOn), "the BMC's answer, not the attacker's")
			g.Expect(dns.Questions()).To(Or(Equal([]string{bmcName + "."}), BeEmpty()),
				"the name is looked up as written, and only so (or not at all, when a connection of an earlier row is reused)")
			at := right[tc.site].snapshot()
			g.Expect(at.hosts).To(HaveEach(HavePrefix(bmcName+":")), "the Host header names the BMC without a final dot")
			if tc.site == "https" {
				g.Expect(at.sni).To(HaveEach(Equal(bmcName)), "TLS asks for, and verifies, the name without a final dot")
			}
		})
	}

	// IPMI: ipmitool resolves the name itself, with libc, through the same resolv.conf.
	t.Run("ipmi through ipmitool", func(t *testing.T) {
		g := NewWithT(t)
		dns.Forget()
		rightIPMI, wrongIPMI := listenUDP(t, rightIP+":623"), listenUDP(t, attacker+":623")
		d, err := reg.New("ipmi://"+bmcName+":623", nameCreds, bmc.Options{})
		if err != nil {
			t.Fatalf("no IPMI driver here (ipmitool missing? make test-deps installs it): %v", err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		done := make(chan struct{})
		go func() { defer close(done); _, _ = d.PowerState(ctx) }()
		// ipmitool sends its first packet to whatever the name resolved to; nobody answers, so stop it then.
		select {
		case <-rightIPMI.first:
		case <-wrongIPMI.first:
		case <-ctx.Done():
		}
		cancel()
		<-done
		g.Expect(wrongIPMI.count()).To(BeZero(), "ipmitool sent its session to the pod answering %s.svc.cluster.local", bmcName)
		g.Expect(rightIPMI.count()).To(BeNumerically(">", 0), "ipmitool reached the BMC")
		g.Expect(dns.Questions()).To(HaveEach(Equal(bmcName+".")), "ipmitool looks the name up as written, and only so")
	})
	t.Run("ipmi presence ping", func(t *testing.T) {
		g := NewWithT(t)
		dns.Forget()
		rightIPMI, wrongIPMI := listenUDP(t, rightIP+":624"), listenUDP(t, attacker+":624")
		_ = ipmi.Ping(t.Context(), bmcName+":624")
		g.Expect(wrongIPMI.count()).To(BeZero())
		g.Expect(rightIPMI.count()).To(Equal(1))
		g.Expect(dns.Questions()).To(Equal([]string{bmcName + "."}))
	})
}

// redfishBMC is a Redfish service with one system in the given power state, using sessions or, with
// basicAuth, basic auth (so that every request carries the credentials).
func redfishBMC(t *testing.T, state redfishmock.PowerState, basicAuth bool) http.Handler {
	t.Helper()
	m := redfishmock.New().WithSystems(1).WithCredentials(nameCreds.Username, nameCreds.Password)
	if basicAuth {
		m = m.WithoutSessionService()
	}
	m, err := m.WithListenAddress("127.0.0.1:0").Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	if err := m.SetPowerState(m.SystemIDs()[0], state); err != nil {
		t.Fatal(err)
	}
	return m
}

func certFor(t *testing.T, ca *testca.CA) tls.Certificate {
	t.Helper()
	cert, err := ca.ServerCertificateFor(bmcName)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// seen is what one server saw: connections, Host headers, TLS server names, and the requests that
// carried the BMC's password.
type seen struct {
	mu     sync.Mutex
	conns  int
	hosts  []string
	sni    []string
	leaked []string
}

func (s *seen) forget() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.conns, s.hosts, s.sni, s.leaked = 0, nil, nil, nil
}

func (s *seen) snapshot() seen {
	s.mu.Lock()
	defer s.mu.Unlock()
	return seen{conns: s.conns, hosts: append([]string(nil), s.hosts...), sni: append([]string(nil), s.sni...),
		leaked: append([]string(nil), s.leaked...)}
}

// serve serves h on addr, over TLS with cert when it is set, recording what it sees.
func serve(t *testing.T, addr string, h http.Handler, cert *tls.Certificate) *seen {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := &seen{}
	record := func(r *http.Request) {
		body := new(bytes.Buffer)
		if r.Body != nil {
			_, _ = body.ReadFrom(r.Body)
			r.Body = http.NoBody
			if body.Len() > 0 {
				r.Body = readCloser{bytes.NewReader(body.Bytes())}
			}
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.hosts = append(s.hosts, r.Host)
		if user, pass, ok := r.BasicAuth(); ok && pass == nameCreds.Password {
			s.leaked = append(s.leaked, r.Method+" "+r.URL.Path+": basic auth as "+user)
		}
		if bytes.Contains(body.Bytes(), []byte(nameCreds.Password)) {
			s.leaked = append(s.leaked, r.Method+" "+r.URL.Path+": the password in the body")
		}
	}
	srv := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { record(r); h.ServeHTTP(w, r) }),
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0), // the refused handshakes of the rows that must fail
		ConnState: func(_ net.Conn, state http.ConnState) {
			if state == http.StateNew {
				s.mu.Lock()
				s.conns++
				s.mu.Unlock()
			}
		},
	}
	if cert != nil {
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS12,
			GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
				s.mu.Lock()
				s.sni = append(s.sni, hello.ServerName)
				s.mu.Unlock()
				return nil, nil
			}})
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return s
}

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }

// udpSink counts the datagrams sent to an address, and answers an RMCP presence ping with a pong.
type udpSink struct {
	mu    sync.Mutex
	n     int
	first chan struct{}
}

func (u *udpSink) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.n
}

func listenUDP(t *testing.T, addr string) *udpSink {
	t.Helper()
	conn, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	u := &udpSink{first: make(chan struct{})}
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := conn.ReadFrom(buf)
			if err != nil {
				return
			}
			u.mu.Lock()
			u.n++
			if u.n == 1 {
				close(u.first)
			}
			u.mu.Unlock()
			// An ASF presence ping (RMCP class 6, message type 0x80) gets its pong (type 0x40).
			if n >= 10 && buf[3] == 0x06 && buf[8] == 0x80 {
				pong := append([]byte{}, buf[:n]...)
				pong[8] = 0x40
				_, _ = conn.WriteTo(pong, from)
			}
		}
	}()
	return u
}
