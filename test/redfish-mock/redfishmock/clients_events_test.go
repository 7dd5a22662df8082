package redfishmock_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/redfish"

	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
)

// The event service read by clients that are not ours: gofish's EventService and Event models, and curl
// following the stream as any SSE client does.

// TestGofishReadsEvents: gofish finds the EventService from the service root and reads its
// ServerSentEventUri, and decodes the stream's events into its Event model.
func TestGofishReadsEvents(t *testing.T) {
	g := NewWithT(t)
	m := start(t, redfishmock.New().WithSystems(2).WithEventKeepAlive(0))
	c, err := gofish.Connect(gofish.ClientConfig{Endpoint: m.URL(), Username: "admin", Password: "password"})
	g.Expect(err).NotTo(HaveOccurred())
	defer c.Logout()

	svc, err := c.Service.EventService()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(svc.ServiceEnabled).To(BeTrue())
	g.Expect(svc.ServerSentEventURI).To(Equal(ssePath))
	g.Expect(svc.EventFormatTypes).To(ConsistOf(redfish.EventEventFormatType))
	g.Expect(svc.RegistryPrefixes).To(ConsistOf("ResourceEvent"))

	session, err := c.GetSession()
	g.Expect(err).NotTo(HaveOccurred())
	s := openStream(t, c.HTTPClient, m.URL(), req{token: session.Token})
	g.Expect(m.SetPowerState("2", redfishmock.PowerOff)).To(Succeed())
	it := s.next(t)
	var ev redfish.Event
	g.Expect(json.Unmarshal([]byte(it.data), &ev)).To(Succeed())
	g.Expect(ev.ODataType).To(HavePrefix("#Event.v1_"))
	g.Expect(ev.ID).To(Equal(it.id), "the SSE id is the event's Id")
	g.Expect(ev.Events).To(HaveLen(1))
	rec := ev.Events[0]
	g.Expect(rec.OriginOfCondition).To(Equal("/redfish/v1/Systems/2"))
	g.Expect(rec.MessageID).To(Equal("ResourceEvent.1.3.0.ResourcePoweredOff"))
	g.Expect(rec.MessageArgs).To(Equal([]string{"/redfish/v1/Systems/2"}))
	g.Expect(rec.EventType).To(Equal(redfish.OtherEventType))
	g.Expect(rec.EventID).To(Equal(ev.ID))
	g.Expect(rec.EventTimestamp).NotTo(BeEmpty())
}

// TestCurlFollowsTheEventStream: curl -N, with basic auth, reads the stream's events as they come, and
// sees the connection drop when the mock drops its streams.
func TestCurlFollowsTheEventStream(t *testing.T) {
	g := NewWithT(t)
	bin := tool(t, "curl", "curl")
	m := start(t, redfishmock.New().WithSystems(1).WithEventKeepAlive(0))
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-sS", "-N", "-u", "admin:password", m.URL()+ssePath)
	cmd.Env = append(os.Environ(), "NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cmd.Start()).To(Succeed())
	g.Eventually(m.OpenEventStreams, wait).Should(Equal(1), "curl opened the stream")

	g.Expect(m.SetPowerState("1", redfishmock.PowerOff)).To(Succeed())
	lines := bufio.NewScanner(out)
	var id, data string
	for data == "" && lines.Scan() {
		if v, ok := strings.CutPrefix(lines.Text(), "id: "); ok {
			id = v
		}
		if v, ok := strings.CutPrefix(lines.Text(), "data: "); ok {
			data = v
		}
	}
	var ev redfish.Event
	g.Expect(json.Unmarshal([]byte(data), &ev)).To(Succeed(), "curl printed %q", data)
	g.Expect(ev.ID).To(Equal(id))
	g.Expect(ev.Events).To(HaveLen(1))
	g.Expect(ev.Events[0].OriginOfCondition).To(Equal("/redfish/v1/Systems/1"))

	g.Expect(m.DropEventStreams()).To(Equal(1))
	_, _ = io.Copy(io.Discard, out) // what curl printed before the drop
	err = cmd.Wait()
	var exit *exec.ExitError
	g.Expect(errors.As(err, &exit)).To(BeTrue(), "curl fails on a stream cut off: %v", err)
	g.Expect(exit.ExitCode()).To(Equal(18), "curl's partial file: the transfer closed with data outstanding (%s)", stderr.String())
}
