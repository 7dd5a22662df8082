package redfishmock_test

import (
	"net/http"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
)

func TestFaults(t *testing.T) {
	sys1 := admin("GET", "/redfish/v1/Systems/1", "")
	sys2 := admin("GET", "/redfish/v1/Systems/2", "")
	root := req{path: "/redfish/v1/"}
	loginReq := req{method: "POST", path: "/redfish/v1/SessionService/Sessions", body: `{"UserName":"admin","Password":"password"}`}

	tests := map[string]struct {
		system string // "" for global faults
		faults redfishmock.Faults
		// each step's request and the status it gets, in order
		steps     []step
		wantPower redfishmock.PowerState
	}{
		"status for a count of requests": {system: "1", faults: redfishmock.Faults{Status: 503, Count: 2},
			steps: steps(sys1, 503, sys1, 503, sys1, 200)},
		"status until cleared": {system: "1", faults: redfishmock.Faults{Status: 500},
			steps: steps(sys1, 500, sys1, 500, sys1, 500, sys1, 500)},
		"a system's faults stay with it": {system: "1", faults: redfishmock.Faults{Status: 500},
			steps: steps(sys2, 200, root, 200, sys1, 500)},
		"global status hits the service root too": {faults: redfishmock.Faults{Status: 502, Count: 1},
			steps: steps(root, 502, root, 200)},
		"stuck power accepts the reset and keeps the state": {system: "1", faults: redfishmock.Faults{StuckPower: true},
			steps:     steps(admin("POST", resetPath, resetBody("ForceOff")), 204, sys1, 200),
			wantPower: redfishmock.PowerOn},
		"refused power-off": {system: "1", faults: redfishmock.Faults{RefusePowerOff: true},
			steps:     steps(admin("POST", resetPath, resetBody("ForceOff")), 500, admin("POST", resetPath, resetBody("PowerCycle")), 500, admin("POST", resetPath, resetBody("Nmi")), 204),
			wantPower: redfishmock.PowerOn},
		"global refused power-off": {faults: redfishmock.Faults{RefusePowerOff: true},
			steps:     steps(admin("POST", resetPath, resetBody("GracefulShutdown")), 500),
			wantPower: redfishmock.PowerOn},
		"rejected auth on one system": {system: "1", faults: redfishmock.Faults{RejectAuth: true},
			steps: steps(sys1, 401, sys2, 200, loginReq, 201)},
		"rejected auth everywhere": {faults: redfishmock.Faults{RejectAuth: true},
			steps: steps(sys2, 401, loginReq, 401, root, 200)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			m := start(t, redfishmock.New().WithSystems(2))
			if tc.system == "" {
				g.Expect(m.SetGlobalFaults(tc.faults)).To(Succeed())
			} else {
				g.Expect(m.SetFaults(tc.system, tc.faults)).To(Succeed())
			}
			for i, s := range tc.steps {
				g.Expect(send(t, http.DefaultClient, m.URL(), s.req).status).To(Equal(s.want), "step %d: %s %s", i, s.req.method, s.req.path)
			}
			if tc.wantPower != "" {
				g.Expect(m.PowerState("1")).To(Equal(tc.wantPower))
			}
			m.ClearFaults()
			for _, r := range []req{sys1, sys2, root} {
				g.Expect(send(t, http.DefaultClient, m.URL(), r).status).To(Equal(http.StatusOK), "healed after ClearFaults")
			}
		})
	}
}

// step is a request and the status it must get.
type step struct {
	req  req
	want int
}

// steps pairs requests with statuses: steps(req1, 200, req2, 503, ...).
func steps(pairs ...any) []step {
	var out []step
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, step{pairs[i].(req), pairs[i+1].(int)})
	}
	return out
}

func TestFaultCountRunsDown(t *testing.T) {
	g := NewWithT(t)
	m := start(t, redfishmock.New().WithSystems(1))
	g.Expect(m.SetFaults("1", redfishmock.Faults{Status: 500, Count: 2})).To(Succeed())
	send(t, http.DefaultClient, m.URL(), admin("GET", "/redfish/v1/Systems/1", ""))
	g.Expect(m.Faults("1")).To(Equal(redfishmock.Faults{Status: 500, Count: 1}))
	send(t, http.DefaultClient, m.URL(), admin("GET", "/redfish/v1/Systems/1", ""))
	g.Expect(m.Faults("1")).To(Equal(redfishmock.Faults{}))
}

func TestDroppedConnection(t *testing.T) {
	g := NewWithT(t)
	m := start(t, redfishmock.New().WithSystems(1))
	g.Expect(m.SetFaults("1", redfishmock.Faults{Drop: true, Count: 1})).To(Succeed())
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

	_, err := client.Get(m.URL() + "/redfish/v1/Systems/1")
	g.Expect(err).To(MatchError(ContainSubstring("EOF")), "the connection closes without an answer")
	g.Expect(send(t, client, m.URL(), admin("GET", "/redfish/v1/Systems/1", "")).status).To(Equal(http.StatusOK))
}

func TestLatency(t *testing.T) {
	g := NewWithT(t)
	clk := fakeClock()
	m := start(t, redfishmock.New().WithSystems(1).WithClock(clk))
	g.Expect(m.SetGlobalFaults(redfishmock.Faults{Latency: 3 * time.Second})).To(Succeed())

	answered := make(chan int)
	go func() {
		resp, err := http.Get(m.URL() + "/redfish/v1/")
		if err != nil {
			answered <- 0
			return
		}
		_ = resp.Body.Close()
		answered <- resp.StatusCode
	}()
	g.Eventually(clk.HasWaiters).Should(BeTrue(), "the request waits on the mock's clock")
	g.Consistently(answered, 50*time.Millisecond).ShouldNot(Receive())
	clk.Step(3 * time.Second)
	g.Eventually(answered).Should(Receive(Equal(http.StatusOK)))
}

func TestFaultValidation(t *testing.T) {
	g := NewWithT(t)
	m := start(t, redfishmock.New().WithSystems(1))
	g.Expect(m.SetFaults("1", redfishmock.Faults{Status: 200})).NotTo(Succeed())
	g.Expect(m.SetGlobalFaults(redfishmock.Faults{Latency: -time.Second})).NotTo(Succeed())
	g.Expect(m.SetFaults("7", redfishmock.Faults{})).To(MatchError(redfishmock.ErrNoSuchSystem))
}
