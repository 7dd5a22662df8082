package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/utils/clock"

	"github.com/metalheal/metalheal/internal/testenv"
	"github.com/metalheal/metalheal/test/harness"
)

// lineLogger passes each complete line to t.Log, so `go test -v` shows the demo as it goes.
type lineLogger struct {
	t   *testing.T
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	for {
		line, err := l.buf.ReadString('\n')
		if err != nil {
			l.buf.WriteString(line)
			return len(p), nil
		}
		l.t.Log(strings.TrimSuffix(line, "\n"))
	}
}

// causal are pairs of steps where the first causes the second: what shows the first is written (or
// happens) before what shows the second.
var causal = [][2]step{
	{stepInjected, stepNotReady},
	{stepNotReady, stepEMRCreated}, // the NodeHealthCheck's duration
	{stepLeaseTaken, stepPoweringOff},
	{stepEMRCreated, stepPoweringOff},
	{stepPoweringOff, stepCordoned},    // the write that records the power-off request claims the taint
	{stepCordoned, stepHostOff},        // no power-off is sent to an untainted node
	{stepPoweringOff, stepHostOff},     // the BMC's power delay
	{stepHostOff, stepPoweredOff},      // the remediator reads Off only once it is off
	{stepPoweredOff, stepFenced},       // never taint on a guess
	{stepPoweredOff, stepPoweringOn},   //
	{stepPoweringOn, stepHostOn},       // the BMC's power delay
	{stepHostOn, stepPoweredOn},        //
	{stepPoweredOn, stepNodeReady},     // the boot delay
	{stepFenced, stepNodeReady},        //
	{stepNodeReady, stepTaintsRemoved}, // the same Node's later update
	{stepNodeReady, stepRemediated},
	{stepRemediated, stepEMRDeleted}, // the NodeHealthCheck's healthy delay
	{stepTaintsRemoved, stepEMRDeleted},
	{stepEMRDeleted, stepEMRGone},
	{stepEMRGone, stepLeaseReleased}, // the check releases its lease once its requests are gone
}

// The demo, as `make demo` runs it: a real control plane, the BMC simulator, simulated kubelets and the
// real manager process. The node must come back with everything clean, and the printed timeline must
// show every step of the story in causal order. Then `kubectl metalheal` must tell the same story from
// what the cluster kept (checkPlugin).
func TestDemo(t *testing.T) {
	g := NewWithT(t)
	out := &testenv.SyncBuffer{}
	// Once the story is told, `kubectl metalheal` is asked about it (plugin_test.go).
	plugin, runs := buildPlugin(t), &pluginRuns{}
	st, err := runStory(context.Background(), options{Workers: 3, Timeout: 3 * time.Minute, Clock: clock.RealClock{},
		afterStory: askPlugin(plugin, runs)}, io.MultiWriter(out, &lineLogger{t: t}))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Missing()).To(BeEmpty())

	// Where each step is first printed as a timeline line, and the revision of the write that showed it.
	text := out.String()
	printedAt := map[step]int{}
	for _, s := range storySteps {
		re := regexp.MustCompile(`(?m)^ +\+\d+\.\ds  ` + regexp.QuoteMeta(s.String()) + ` `)
		loc := re.FindStringIndex(text)
		g.Expect(loc).NotTo(BeNil(), "the timeline has no %q line", s)
		printedAt[s] = loc[0]
	}
	revision := map[step]string{}
	for _, e := range st.Timeline() {
		if _, ok := revision[e.Step]; !ok && e.Step != stepNote {
			revision[e.Step] = e.Revision
		}
	}
	for _, s := range storySteps {
		t.Logf("%-22s revision %s", s, revision[s])
	}
	seen := st.Seen()
	g.Expect(seen[stepInjected]).To(BeZero())
	for _, c := range causal {
		before, after := c[0], c[1]
		// Two writes the API server told about are ordered by their revisions: the world has one etcd,
		// whose revisions order every write of every kind. The demo's watches (one per kind) may deliver
		// two writes a few milliseconds apart in either order, so their printed order proves less.
		if rb, ra := revision[before], revision[after]; rb != "" && ra != "" {
			cmp, err := resourceversion.CompareResourceVersion(rb, ra)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(cmp).To(Equal(-1), "%q (revision %s) must be written before %q (revision %s)", before, rb, after, ra)
			continue
		}
		g.Expect(printedAt[before]).To(BeNumerically("<", printedAt[after]), "%q must be printed before %q", before, after)
		g.Expect(seen[before]).To(BeNumerically("<=", seen[after]), "%q must be timed before %q", before, after)
	}
	// The node lifecycle controller waited for its grace period (less the last heartbeat's age) and the
	// NodeHealthCheck for its duration (less the condition time's truncation to a second).
	g.Expect(seen[stepNotReady]).To(BeNumerically(">=", gracePeriod-leaseInterval-time.Second))
	g.Expect(seen[stepEMRCreated] - seen[stepNotReady]).To(BeNumerically(">=", unhealthyFor-time.Second))
	// The summary and the verdict.
	for _, want := range []string{"Summary (times since the failure)", "  detected ", "  fenced ", "  recovered ", "  clean ",
		"All clean: worker-2 is Ready"} {
		g.Expect(text).To(ContainSubstring(want))
	}
	g.Expect(text).NotTo(ContainSubstring("WARNING"), "a transient fault is cured by one power cycle")
	g.Expect(text).NotTo(ContainSubstring(harness.BMCPassword))

	checkPlugin(t, st, runs)
}

// The power-cut story (make demo ARGS=--story=power-cut): a host's power is cut; the power watch reads
// the BMC, the kubelet's port is closed, the check acts on PoweredOff=True at once and the remediator,
// reading the host off, fences it without a power-off. The out-of-service taint must be on within 5s of
// the cut when the simulator's event stream told (issue 34), within 5s plus the watch's poll interval when
// a poll did — as it must with the stream dropped before the cut (--drop-event-stream); and the host is
// only powered on again.
func TestDemoPowerCut(t *testing.T) {
	for _, drop := range []bool{false, true} {
		t.Run(fmt.Sprintf("event stream dropped %t", drop), func(t *testing.T) {
			g := NewWithT(t)
			out := &testenv.SyncBuffer{}
			st, err := runStory(context.Background(), options{Story: storyPowerCut, DropEventStream: drop, Workers: 3,
				Timeout: 3 * time.Minute, Clock: clock.RealClock{}}, io.MultiWriter(out, &lineLogger{t: t}))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(st.Missing()).To(BeEmpty())

			seen := st.Seen()
			poweredOff, ok := st.PoweredOffAt()
			g.Expect(ok).To(BeTrue(), "the Node's PoweredOff condition turned True")
			g.Expect(seen[stepHostOff]).To(BeNumerically("<", time.Second), "the cut is the host's power-off")
			g.Expect(poweredOff).To(BeNumerically("<=", powerWatchPoll+time.Second))
			g.Expect(seen[stepEMRCreated]).To(BeNumerically(">=", poweredOff))
			text := out.String()
			bound := powerWatchPoll + 5*time.Second
			if strings.Contains(text, "The BMC tells metalheal through its event stream") {
				bound = 5 * time.Second
			}
			if drop {
				g.Expect(text).To(ContainSubstring("The BMC tells metalheal through a poll every 5s (its event stream dropped)"))
			}
			g.Expect(seen[stepFenced]).To(BeNumerically("<=", bound), "cut → out-of-service taint")
			t.Logf("cut → PoweredOff=True %s, → request %s, → out-of-service taint %s", poweredOff, seen[stepEMRCreated], seen[stepFenced])
			for _, want := range []string{"Summary (times since the power cut)", "  reported ", "  fenced ", "  without ",
				"PoweredOff=True", "BMCReportedOff", "All clean: worker-2 is Ready"} {
				g.Expect(text).To(ContainSubstring(want))
			}
			g.Expect(text).NotTo(ContainSubstring(harness.BMCPassword))
		})
	}
}
