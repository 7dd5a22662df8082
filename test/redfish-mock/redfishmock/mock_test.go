package redfishmock_test

import (
	"crypto/tls"
	"net"
	"net/http"
	"runtime"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
)

func TestServiceRoot(t *testing.T) {
	tests := map[string]struct {
		mock         *redfishmock.Mock
		wantSessions bool
	}{
		"with a SessionService":    {mock: redfishmock.New().WithSystems(1), wantSessions: true},
		"without a SessionService": {mock: redfishmock.New().WithSystems(1).WithoutSessionService()},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			m := start(t, tc.mock)

			for _, path := range []string{"/redfish/v1/", "/redfish/v1"} {
				root := send(t, http.DefaultClient, m.URL(), req{path: path})
				g.Expect(root.status).To(Equal(http.StatusOK), "the service root needs no credentials")
				g.Expect(root.json).To(HaveKeyWithValue("@odata.id", "/redfish/v1/"))
				g.Expect(root.json).To(HaveKeyWithValue("@odata.type", HavePrefix("#ServiceRoot.")))
				g.Expect(root.json).To(HaveKey("RedfishVersion"))
				g.Expect(root.json).To(HaveKeyWithValue("Systems", HaveKeyWithValue("@odata.id", "/redfish/v1/Systems")))
				if tc.wantSessions {
					g.Expect(root.json).To(HaveKeyWithValue("SessionService", HaveKeyWithValue("@odata.id", "/redfish/v1/SessionService")))
					g.Expect(root.json).To(HaveKeyWithValue("Links", HaveKeyWithValue("Sessions", HaveKeyWithValue("@odata.id", "/redfish/v1/SessionService/Sessions"))))
				} else {
					g.Expect(root.json).NotTo(HaveKey("SessionService"))
					g.Expect(root.json).To(HaveKeyWithValue("Links", BeEmpty()))
				}
			}
			versions := send(t, http.DefaultClient, m.URL(), req{path: "/redfish"})
			g.Expect(versions.json).To(HaveKeyWithValue("v1", "/redfish/v1/"))

			loginReply := send(t, http.DefaultClient, m.URL(), req{method: http.MethodPost,
				path: "/redfish/v1/SessionService/Sessions", body: `{"UserName":"admin","Password":"password"}`})
			if tc.wantSessions {
				g.Expect(loginReply.status).To(Equal(http.StatusCreated))
			} else {
				g.Expect(loginReply.status).To(Equal(http.StatusNotFound))
			}
		})
	}
}

func TestComputerSystem(t *testing.T) {
	g := NewWithT(t)
	m := start(t, redfishmock.New().WithSystems(2))

	list := send(t, http.DefaultClient, m.URL(), admin("GET", "/redfish/v1/Systems", ""))
	g.Expect(list.status).To(Equal(http.StatusOK))
	g.Expect(list.json).To(HaveKeyWithValue("Members@odata.count", BeNumerically("==", 2)))
	g.Expect(list.json["Members"]).To(ConsistOf(
		HaveKeyWithValue("@odata.id", "/redfish/v1/Systems/1"),
		HaveKeyWithValue("@odata.id", "/redfish/v1/Systems/2")))

	sys := send(t, http.DefaultClient, m.URL(), admin("GET", "/redfish/v1/Systems/2", ""))
	g.Expect(sys.status).To(Equal(http.StatusOK))
	g.Expect(sys.json).To(And(
		HaveKeyWithValue("@odata.id", "/redfish/v1/Systems/2"),
		HaveKeyWithValue("@odata.type", HavePrefix("#ComputerSystem.")),
		HaveKeyWithValue("Id", "2"),
		HaveKey("Name"),
		HaveKeyWithValue("PowerState", "On"),
		HaveKeyWithValue("Status", HaveKeyWithValue("State", "Enabled")),
	))
	g.Expect(sys.json["Actions"]).To(HaveKeyWithValue("#ComputerSystem.Reset", And(
		HaveKeyWithValue("target", "/redfish/v1/Systems/2/Actions/ComputerSystem.Reset"),
		HaveKeyWithValue("ResetType@Redfish.AllowableValues", ConsistOf(
			"On", "ForceOff", "GracefulShutdown", "ForceRestart", "GracefulRestart", "PowerCycle", "Nmi")),
	)))

	g.Expect(send(t, http.DefaultClient, m.URL(), admin("GET", "/redfish/v1/Systems/3", "")).status).To(Equal(http.StatusNotFound))
	g.Expect(send(t, http.DefaultClient, m.URL(), admin("POST", resetPath, resetBody("Dance"))).status).To(Equal(http.StatusBadRequest))
	g.Expect(send(t, http.DefaultClient, m.URL(), admin("POST", resetPath, "{")).status).To(Equal(http.StatusBadRequest))
	g.Expect(m.PowerState("1")).To(Equal(redfishmock.PowerOn), "refused resets change nothing")
}

func TestAuthentication(t *testing.T) {
	m := start(t, redfishmock.New().WithSystems(2).WithSystemCredentials("2", "owner2", "pw2"))
	token := login(t, m)

	tests := map[string]struct {
		req  req
		want int
	}{
		"no credentials":                     {req: req{path: "/redfish/v1/Systems/1"}, want: http.StatusUnauthorized},
		"no credentials, collection":         {req: req{path: "/redfish/v1/Systems"}, want: http.StatusUnauthorized},
		"no credentials, session service":    {req: req{path: "/redfish/v1/SessionService"}, want: http.StatusUnauthorized},
		"no credentials, reset":              {req: req{method: "POST", path: resetPath, body: resetBody("ForceOff")}, want: http.StatusUnauthorized},
		"basic auth":                         {req: admin("GET", "/redfish/v1/Systems/1", ""), want: http.StatusOK},
		"basic auth, wrong password":         {req: req{path: "/redfish/v1/Systems/1", user: "admin", pass: "nope"}, want: http.StatusUnauthorized},
		"session token":                      {req: req{path: "/redfish/v1/Systems/1", token: token}, want: http.StatusOK},
		"unknown session token":              {req: req{path: "/redfish/v1/Systems/1", token: "bogus"}, want: http.StatusUnauthorized},
		"own account on its own system":      {req: req{path: "/redfish/v1/Systems/2", user: "owner2", pass: "pw2"}, want: http.StatusOK},
		"service account on a system's own":  {req: admin("GET", "/redfish/v1/Systems/2", ""), want: http.StatusForbidden},
		"system account on another system":   {req: req{path: "/redfish/v1/Systems/1", user: "owner2", pass: "pw2"}, want: http.StatusForbidden},
		"login with the wrong password":      {req: req{method: "POST", path: "/redfish/v1/SessionService/Sessions", body: `{"UserName":"admin","Password":"x"}`}, want: http.StatusUnauthorized},
		"login with a system's own account":  {req: req{method: "POST", path: "/redfish/v1/SessionService/Sessions", body: `{"UserName":"owner2","Password":"pw2"}`}, want: http.StatusCreated},
		"service root without credentials":   {req: req{path: "/redfish/v1/"}, want: http.StatusOK},
		"unknown resource with credentials":  {req: admin("GET", "/redfish/v1/Chassis", ""), want: http.StatusNotFound},
		"unknown resource without":           {req: req{path: "/redfish/v1/Chassis"}, want: http.StatusUnauthorized},
		"control endpoint when it is not on": {req: req{path: "/mock/systems"}, want: http.StatusNotFound},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			NewWithT(t).Expect(send(t, http.DefaultClient, m.URL(), tc.req).status).To(Equal(tc.want))
		})
	}

	t.Run("each account lists only its systems", func(t *testing.T) {
		g := NewWithT(t)
		own := send(t, http.DefaultClient, m.URL(), req{path: "/redfish/v1/Systems", user: "owner2", pass: "pw2"})
		g.Expect(own.json["Members"]).To(ConsistOf(HaveKeyWithValue("@odata.id", "/redfish/v1/Systems/2")))
		svc := send(t, http.DefaultClient, m.URL(), admin("GET", "/redfish/v1/Systems", ""))
		g.Expect(svc.json["Members"]).To(ConsistOf(HaveKeyWithValue("@odata.id", "/redfish/v1/Systems/1")))
	})
}

func TestSessions(t *testing.T) {
	g := NewWithT(t)
	m := start(t, redfishmock.New().WithSystems(1))

	created := send(t, http.DefaultClient, m.URL(), req{method: "POST", path: "/redfish/v1/SessionService/Sessions",
		body: `{"UserName":"admin","Password":"password"}`})
	g.Expect(created.status).To(Equal(http.StatusCreated))
	token, location := created.header.Get("X-Auth-Token"), created.header.Get("Location")
	g.Expect(token).NotTo(BeEmpty())
	g.Expect(location).To(HavePrefix("/redfish/v1/SessionService/Sessions/"))
	g.Expect(created.json).To(HaveKeyWithValue("@odata.id", location))
	g.Expect(m.SessionCount()).To(Equal(1))

	g.Expect(send(t, http.DefaultClient, m.URL(), req{path: location, token: token}).status).To(Equal(http.StatusOK))
	g.Expect(send(t, http.DefaultClient, m.URL(), req{method: "DELETE", path: location, token: token}).status).To(Equal(http.StatusNoContent))
	g.Expect(m.SessionCount()).To(BeZero())
	g.Expect(send(t, http.DefaultClient, m.URL(), req{path: "/redfish/v1/Systems/1", token: token}).status).
		To(Equal(http.StatusUnauthorized), "a logged-out token is refused")

	token = login(t, m)
	m.ExpireSessions()
	g.Expect(send(t, http.DefaultClient, m.URL(), req{path: "/redfish/v1/Systems/1", token: token}).status).
		To(Equal(http.StatusUnauthorized), "an expired token is refused")

	g.Expect(m.Requests()).To(ContainElement(And(
		HaveField("Path", "/redfish/v1/Systems/1"), HaveField("System", "1"), HaveField("Auth", redfishmock.AuthSession))))
}

// Systems added to a running mock are served, reset, recorded and heard like the first ones; an ID
// that is taken, repeated or not a path segment adds nothing.
func TestAddSystems(t *testing.T) {
	g := NewWithT(t)
	m := start(t, redfishmock.New().WithSystems(1))
	heard := make(chan string, 10)
	m.OnPowerChange(func(id string, _, to redfishmock.PowerState) { heard <- id + " " + string(to) })

	g.Expect(m.AddSystems("a-worker-1", "b-worker-1")).To(Succeed())
	g.Expect(m.SystemIDs()).To(Equal([]string{"1", "a-worker-1", "b-worker-1"}))
	sys := send(t, http.DefaultClient, m.URL(), admin("GET", m.SystemPath("b-worker-1"), ""))
	g.Expect(sys.status).To(Equal(http.StatusOK))
	g.Expect(sys.json).To(And(HaveKeyWithValue("Id", "b-worker-1"), HaveKeyWithValue("PowerState", "On")))
	reset := send(t, http.DefaultClient, m.URL(), admin("POST", m.SystemPath("b-worker-1")+"/Actions/ComputerSystem.Reset", resetBody("ForceOff")))
	g.Expect(reset.status).To(Equal(http.StatusNoContent))
	g.Expect(m.Resets("b-worker-1")).To(Equal([]string{"ForceOff"}))
	g.Expect(m.Resets("a-worker-1")).To(BeEmpty())
	g.Expect(m.Requests()).To(ContainElement(HaveField("System", "b-worker-1")))
	g.Eventually(heard).Should(Receive(Equal("b-worker-1 Off")))
	g.Consistently(heard).ShouldNot(Receive())

	for name, ids := range map[string][]string{
		"taken":              {"c", "a-worker-1"},
		"repeated":           {"c", "c"},
		"empty":              {""},
		"not a path segment": {"c/d"},
	} {
		g.Expect(m.AddSystems(ids...)).NotTo(Succeed(), name)
	}
	g.Expect(m.SystemIDs()).To(HaveLen(3), "a refused call adds nothing")
}

func TestRequestRecord(t *testing.T) {
	g := NewWithT(t)
	clk := fakeClock()
	m := start(t, redfishmock.New().WithSystems(1).WithClock(clk).WithRequestLimit(4))
	token := login(t, m)
	send(t, http.DefaultClient, m.URL(), req{path: "/redfish/v1/Systems/1", token: token})
	send(t, http.DefaultClient, m.URL(), admin("POST", resetPath, resetBody("Nmi")))
	send(t, http.DefaultClient, m.URL(), req{path: "/redfish/v1/Systems"})

	g.Expect(m.Requests()).To(Equal([]redfishmock.Request{
		{Method: "POST", Path: "/redfish/v1/SessionService/Sessions", Auth: redfishmock.AuthNone, Time: clk.Now()},
		{Method: "GET", Path: "/redfish/v1/Systems/1", System: "1", Auth: redfishmock.AuthSession, Time: clk.Now()},
		{Method: "POST", Path: resetPath, System: "1", Auth: redfishmock.AuthBasic, Time: clk.Now()},
		{Method: "GET", Path: "/redfish/v1/Systems", Auth: redfishmock.AuthNone, Time: clk.Now()},
	}))
	send(t, http.DefaultClient, m.URL(), req{path: "/redfish/v1/"})
	g.Expect(m.Requests()).To(HaveLen(3), "a full record drops its oldest half")
	g.Expect(m.Requests()[2].Path).To(Equal("/redfish/v1"))
	m.ResetRequests()
	g.Expect(m.Requests()).To(BeEmpty())
}

func TestTLS(t *testing.T) {
	g := NewWithT(t)
	m := start(t, redfishmock.New().WithSystems(1).WithTLS())
	g.Expect(m.URL()).To(HavePrefix("https://127.0.0.1:"))

	_, err := http.Get(m.URL() + "/redfish/v1/")
	g.Expect(err).To(MatchError(ContainSubstring("certificate")), "a self-signed certificate is not trusted by default")

	trusting := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: m.CertPool(), MinVersion: tls.VersionTLS12}}}
	g.Expect(send(t, trusting, m.URL(), admin("GET", "/redfish/v1/Systems/1", "")).status).To(Equal(http.StatusOK))
}

// TestClosedRefuses: once Close returns, the address refuses connections, even when Close follows Start
// at once (before the server goroutine has run): a client must see "connection refused", not a connection
// accepted and then reset.
func TestClosedRefuses(t *testing.T) {
	g := NewWithT(t)
	for range 200 {
		m, err := redfishmock.New().WithSystems(1).Start()
		g.Expect(err).NotTo(HaveOccurred())
		m.Close()
		conn, err := net.DialTimeout("tcp", m.URL()[len("http://"):], time.Second)
		if err == nil {
			_ = conn.Close()
		}
		g.Expect(err).To(MatchError(ContainSubstring("connection refused")))
	}
}

// TestThousandsOfSystems: systems cost memory, not goroutines or timers.
func TestThousandsOfSystems(t *testing.T) {
	g := NewWithT(t)
	clk := fakeClock()
	before := runtime.NumGoroutine()
	m := start(t, redfishmock.New().WithSystems(5000).WithClock(clk).WithPowerDelay(time.Minute))
	g.Expect(runtime.NumGoroutine() - before).To(BeNumerically("<", 10))
	g.Expect(clk.Waiters()).To(BeZero(), "idle systems hold no timers")

	list := send(t, http.DefaultClient, m.URL(), admin("GET", "/redfish/v1/Systems", ""))
	g.Expect(list.json).To(HaveKeyWithValue("Members@odata.count", BeNumerically("==", 5000)))
	sys := send(t, http.DefaultClient, m.URL(), admin("GET", "/redfish/v1/Systems/4321", ""))
	g.Expect(sys.json).To(HaveKeyWithValue("Id", "4321"))
}
