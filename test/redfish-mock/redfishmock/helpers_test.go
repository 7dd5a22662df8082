package redfishmock_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
)

// start starts m and stops it when the test ends.
func start(t *testing.T, m *redfishmock.Mock) *redfishmock.Mock {
	t.Helper()
	started, err := m.Start()
	if err != nil {
		t.Fatalf("start mock: %v", err)
	}
	t.Cleanup(started.Close)
	return started
}

func fakeClock() *clocktesting.FakeClock {
	return clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
}

// req is one request to the mock.
type req struct {
	method, path, body string
	user, pass         string // basic auth when user is set
	token              string // X-Auth-Token when set
}

// reply is what came back.
type reply struct {
	status int
	header http.Header
	json   map[string]any
}

func send(t *testing.T, client *http.Client, base string, r req) reply {
	t.Helper()
	if r.method == "" {
		r.method = http.MethodGet
	}
	hr, err := http.NewRequest(r.method, base+r.path, strings.NewReader(r.body))
	if err != nil {
		t.Fatal(err)
	}
	if r.user != "" {
		hr.SetBasicAuth(r.user, r.pass)
	}
	if r.token != "" {
		hr.Header.Set("X-Auth-Token", r.token)
	}
	resp, err := client.Do(hr)
	if err != nil {
		t.Fatalf("%s %s: %v", r.method, r.path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	out := reply{status: resp.StatusCode, header: resp.Header}
	if len(b) > 0 && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(b, &out.json); err != nil {
			t.Fatalf("%s %s: bad JSON %q: %v", r.method, r.path, b, err)
		}
	}
	return out
}

// admin is a request with the default account's basic auth.
func admin(method, path, body string) req {
	return req{method: method, path: path, body: body, user: "admin", pass: "password"}
}

// login opens a session with the default account and returns its token.
func login(t *testing.T, m *redfishmock.Mock) string {
	t.Helper()
	r := send(t, http.DefaultClient, m.URL(), req{method: http.MethodPost, path: "/redfish/v1/SessionService/Sessions",
		body: `{"UserName":"admin","Password":"password"}`})
	NewWithT(t).Expect(r.status).To(Equal(http.StatusCreated))
	return r.header.Get("X-Auth-Token")
}

func resetBody(resetType string) string { return `{"ResetType":"` + resetType + `"}` }

const resetPath = "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset"

// powerLog records power changes as "id:from->to".
type powerLog struct {
	mu      sync.Mutex
	changes []string
}

func (l *powerLog) hook(id string, from, to redfishmock.PowerState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.changes = append(l.changes, id+":"+string(from)+"->"+string(to))
}

func (l *powerLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.changes...)
}
