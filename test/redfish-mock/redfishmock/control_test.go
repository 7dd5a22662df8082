package redfishmock_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
)

func TestControlEndpoint(t *testing.T) {
	m := start(t, redfishmock.New().WithSystems(2).WithControlEndpoint())
	ctl := func(method, path, body string) int {
		return send(t, http.DefaultClient, m.URL(), req{method: method, path: path, body: body}).status
	}
	sys1 := admin("GET", "/redfish/v1/Systems/1", "")

	t.Run("per-system faults", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(ctl("POST", "/mock/systems/1/faults", `{"status":503,"count":1,"latency":"1.5s","stuckPower":true}`)).To(Equal(http.StatusNoContent))
		g.Expect(m.Faults("1")).To(Equal(redfishmock.Faults{Status: 503, Count: 1, Latency: 1500 * time.Millisecond, StuckPower: true}))

		var st map[string]any
		g.Expect(json.Unmarshal([]byte(get(t, m.URL()+"/mock/systems/1")), &st)).To(Succeed())
		g.Expect(st).To(HaveKeyWithValue("powerState", "On"))
		g.Expect(st).To(HaveKeyWithValue("faults", HaveKeyWithValue("latency", "1.5s")))

		g.Expect(ctl("DELETE", "/mock/systems/1/faults", "")).To(Equal(http.StatusNoContent))
		g.Expect(m.Faults("1")).To(Equal(redfishmock.Faults{}))
	})
	t.Run("a fault injected over HTTP hits the next request", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(ctl("POST", "/mock/systems/1/faults", `{"status":500,"count":1}`)).To(Equal(http.StatusNoContent))
		g.Expect(send(t, http.DefaultClient, m.URL(), sys1).status).To(Equal(http.StatusInternalServerError))
		g.Expect(send(t, http.DefaultClient, m.URL(), sys1).status).To(Equal(http.StatusOK))
	})
	t.Run("global faults", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(ctl("POST", "/mock/faults", `{"rejectAuth":true}`)).To(Equal(http.StatusNoContent))
		g.Expect(send(t, http.DefaultClient, m.URL(), sys1).status).To(Equal(http.StatusUnauthorized))
		g.Expect(ctl("DELETE", "/mock/faults", "")).To(Equal(http.StatusNoContent))
		g.Expect(send(t, http.DefaultClient, m.URL(), sys1).status).To(Equal(http.StatusOK))
	})
	t.Run("power", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(ctl("POST", "/mock/systems/2/power", `{"powerState":"Off"}`)).To(Equal(http.StatusNoContent))
		g.Expect(m.PowerState("2")).To(Equal(redfishmock.PowerOff))
		g.Expect(get(t, m.URL()+"/mock/systems")).To(And(ContainSubstring(`"id":"1","powerState":"On"`), ContainSubstring(`"id":"2","powerState":"Off"`)))
	})
	t.Run("host", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(ctl("POST", "/mock/systems/2/host", `{"ignoreGracefulShutdown":true,"powerOffAfterNMI":"45s"}`)).To(Equal(http.StatusNoContent))
		g.Expect(m.Host("2")).To(Equal(redfishmock.Host{IgnoreGracefulShutdown: true, PowerOffAfterNMI: 45 * time.Second}))
		g.Expect(get(t, m.URL()+"/mock/systems/2")).To(ContainSubstring(`"host":{"ignoreGracefulShutdown":true,"powerOffAfterNMI":"45s"}`))
		g.Expect(ctl("POST", "/mock/systems/2/host", `{"powerOffAfterNMI":"1s","rebootAfterNMI":"1s"}`)).To(Equal(http.StatusBadRequest))
		g.Expect(ctl("POST", "/mock/systems/2/host", `{"rebootAfterNMI":"soon"}`)).To(Equal(http.StatusBadRequest))
		g.Expect(ctl("POST", "/mock/systems/2/host", `{}`)).To(Equal(http.StatusNoContent))
		g.Expect(m.Host("2")).To(Equal(redfishmock.Host{}))
	})
	t.Run("sessions and requests", func(t *testing.T) {
		g := NewWithT(t)
		token := login(t, m)
		g.Expect(ctl("DELETE", "/mock/sessions", "")).To(Equal(http.StatusNoContent))
		g.Expect(send(t, http.DefaultClient, m.URL(), req{path: "/redfish/v1/Systems/1", token: token}).status).To(Equal(http.StatusUnauthorized))

		g.Expect(get(t, m.URL()+"/mock/requests")).To(ContainSubstring(`"Path":"/redfish/v1/SessionService/Sessions"`))
		g.Expect(get(t, m.URL()+"/mock/requests")).NotTo(ContainSubstring(`/mock/`), "the control endpoint is not recorded")
		g.Expect(ctl("DELETE", "/mock/requests", "")).To(Equal(http.StatusNoContent))
		g.Expect(m.Requests()).To(BeEmpty())
	})
	t.Run("mistakes", func(t *testing.T) {
		tests := map[string]struct {
			method, path, body string
			want               int
		}{
			"unknown system":      {"POST", "/mock/systems/9/faults", `{}`, http.StatusNotFound},
			"bad JSON":            {"POST", "/mock/systems/1/faults", `{`, http.StatusBadRequest},
			"bad latency":         {"POST", "/mock/faults", `{"latency":"soon"}`, http.StatusBadRequest},
			"not an error status": {"POST", "/mock/faults", `{"status":204}`, http.StatusBadRequest},
			"not a settled state": {"POST", "/mock/systems/1/power", `{"powerState":"PoweringOn"}`, http.StatusBadRequest},
		}
		for name, tc := range tests {
			t.Run(name, func(t *testing.T) {
				NewWithT(t).Expect(ctl(tc.method, tc.path, tc.body)).To(Equal(tc.want))
			})
		}
	})
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strings.TrimSpace(string(b))
}
