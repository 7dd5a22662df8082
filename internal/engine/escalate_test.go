package engine

import (
	"cmp"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/metalheal/metalheal/internal/template"
)

// The steps of the walk's table: a 10-minute power cycle, a later power cycle of its own template (a
// step of the same kind), a Metal3 remediation, and a power cycle without a timeout.
var (
	pcrGVK   = schema.GroupVersionKind{Group: "remediation.metalheal.io", Version: "v1alpha1", Kind: "PowerCycleRemediation"}
	m3GVK    = schema.GroupVersionKind{Group: "infrastructure.cluster.x-k8s.io", Version: "v1beta1", Kind: "Metal3Remediation"}
	reboot   = Step{GVK: pcrGVK, Namespace: "ns", Template: "reboot", Timeout: 10 * time.Minute}
	fence    = Step{GVK: pcrGVK, Namespace: "ns", Template: "fence", Timeout: 20 * time.Minute}
	metal3   = Step{GVK: m3GVK, Namespace: "ns", Template: "m3", Timeout: 20 * time.Minute}
	noLimit  = Step{GVK: pcrGVK, Namespace: "ns", Template: "reboot"}
	walkT0   = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	fenceFor = template.LaterStepName("m", fence.Template)
)

func ago(d time.Duration) time.Time { return walkT0.Add(-d) }

// req is step s's request for target m, created at created, as the cache shows it.
func req(s Step, created time.Time, mods ...func(*Request)) Request {
	q := Request{Ref: Ref{APIVersion: s.GVK.GroupVersion().String(), Kind: s.GVK.Kind, Namespace: s.Namespace, Name: "m"},
		TemplateName: s.Template, Created: created}
	for _, f := range mods {
		f(&q)
	}
	return q
}

// rec is the status record of step s started at started (ended: zero while it runs). A Machine's record
// names no request; the walk finds it by kind and template.
func rec(s Step, started, ended time.Time) Record {
	return Record{APIVersion: s.GVK.GroupVersion().String(), Kind: s.GVK.Kind, TemplateName: s.Template, Started: started, Ended: ended}
}

func deleting(q *Request) { q.Deleting = true }
func failed(q *Request)   { q.Failed = true }
func markedAt(at time.Time) func(*Request) {
	return func(q *Request) { q.TimedOut, q.TimedOutAt = true, at }
}
func processing(s metav1.ConditionStatus) func(*Request) {
	return func(q *Request) { q.Processing = s }
}
func named(name string) func(*Request) { return func(q *Request) { q.Ref.Name = name } }

// TestEscalateWalk: the escalation walk of one target (moved from the MachineHealthCheck's TestEscalate,
// which tested its adapter of it). The cases both kinds share are rows of the parity table
// (enginetest); this table holds what that one does not compare: request names, First, the overdue list,
// the edges. Records are the walk's, without the record of the step it asks to start.
func TestEscalateWalk(t *testing.T) {
	for _, tt := range []struct {
		name          string
		steps         []Step
		records       []Record
		requests      []Request
		wantCreate    int // the step asked to start, -1 for none
		wantFirst     bool
		wantTimeOut   int
		wantDelete    int
		wantExhausted bool // every step has just ended
		wantRecords   int
		// wantName is the created request's name when not the target's.
		wantName string
		// wantWaitingFor is the request the next step waits for; wantWaitCheck when that wait runs out.
		wantWaitingFor string
		wantWaitCheck  time.Time
		wantOverdue    int
	}{
		{name: "nothing yet: the first step starts", steps: []Step{reboot, metal3}, wantCreate: 0, wantFirst: true},
		{name: "Succeeded=True does not end a step early", steps: []Step{reboot, metal3}, wantCreate: -1,
			records: []Record{rec(reboot, ago(time.Minute), time.Time{})}, requests: []Request{req(reboot, ago(time.Minute))}, wantRecords: 1},
		{name: "next step of the same kind: a name of its own, the old request is not deleted", steps: []Step{reboot, fence},
			records: []Record{rec(reboot, ago(11*time.Minute), time.Time{})}, requests: []Request{req(reboot, ago(11*time.Minute))},
			wantTimeOut: 1, wantCreate: 1, wantName: fenceFor, wantRecords: 1},
		{name: "same kind, old request going away without a Processing condition: not waited for", steps: []Step{reboot, fence},
			records:    []Record{rec(reboot, ago(11*time.Minute), ago(time.Minute))},
			requests:   []Request{req(reboot, ago(11*time.Minute), deleting, markedAt(ago(time.Minute)))},
			wantCreate: 1, wantName: fenceFor, wantRecords: 1},
		{name: "same kind, old request going away while Processing=True: wait", steps: []Step{reboot, fence}, wantCreate: -1,
			records:     []Record{rec(reboot, ago(11*time.Minute), ago(time.Minute))},
			requests:    []Request{req(reboot, ago(11*time.Minute), deleting, markedAt(ago(time.Minute)), processing(metav1.ConditionTrue))},
			wantRecords: 1, wantWaitingFor: "PowerCycleRemediation ns/m", wantWaitCheck: walkT0.Add(4 * time.Minute)},
		{name: "same kind, old request gone: the next step starts (memory in status)", steps: []Step{reboot, fence},
			records: []Record{rec(reboot, ago(11*time.Minute), ago(time.Minute))}, wantCreate: 1, wantName: fenceFor, wantRecords: 1},
		{name: "step timed out while its request reports Processing=True: marked, the next step waits", steps: []Step{reboot, metal3},
			records: []Record{rec(reboot, ago(10*time.Minute), time.Time{})}, wantCreate: -1,
			requests:    []Request{req(reboot, ago(10*time.Minute), processing(metav1.ConditionTrue))},
			wantTimeOut: 1, wantRecords: 1, wantWaitingFor: "PowerCycleRemediation ns/m", wantWaitCheck: walkT0.Add(5 * time.Minute)},
		{name: "Succeeded=False with Processing=False: handed over, the next step starts at once", steps: []Step{reboot, metal3},
			records:  []Record{rec(reboot, ago(time.Minute), time.Time{})},
			requests: []Request{req(reboot, ago(time.Minute), failed, processing(metav1.ConditionFalse))}, wantTimeOut: 1, wantCreate: 1, wantRecords: 1},
		{name: "ended request still Processing=True a moment before the bound: wait", steps: []Step{reboot, metal3}, wantCreate: -1,
			records:     []Record{rec(reboot, ago(15*time.Minute), ago(5*time.Minute-time.Second))},
			requests:    []Request{req(reboot, ago(15*time.Minute), markedAt(ago(5*time.Minute-time.Second)), processing(metav1.ConditionTrue))},
			wantRecords: 1, wantWaitingFor: "PowerCycleRemediation ns/m", wantWaitCheck: walkT0.Add(time.Second)},
		{name: "ended request past the bound: overdue, the next step starts without it", steps: []Step{reboot, metal3}, wantCreate: 1,
			records:     []Record{rec(reboot, ago(15*time.Minute), ago(5*time.Minute))},
			requests:    []Request{req(reboot, ago(15*time.Minute), markedAt(ago(5*time.Minute)), processing(metav1.ConditionTrue))},
			wantRecords: 1, wantOverdue: 1},
		{name: "both same-kind requests live: nothing deleted, nothing created", steps: []Step{reboot, fence}, wantCreate: -1,
			records: []Record{rec(reboot, ago(20*time.Minute), ago(10*time.Minute)), rec(fence, ago(5*time.Minute), time.Time{})},
			requests: []Request{req(reboot, ago(20*time.Minute), markedAt(ago(10*time.Minute)), processing(metav1.ConditionTrue)),
				req(fence, ago(5*time.Minute), named(fenceFor), processing(metav1.ConditionTrue))}, wantRecords: 2},
		{name: "last step timed out: exhausted, request marked", steps: []Step{reboot, metal3}, wantCreate: -1,
			records:  []Record{rec(reboot, ago(time.Hour), ago(50*time.Minute)), rec(metal3, ago(50*time.Minute), time.Time{})},
			requests: []Request{req(reboot, ago(time.Hour)), req(metal3, ago(50*time.Minute))}, wantTimeOut: 1, wantExhausted: true, wantRecords: 2},
		{name: "exhausted earlier: nothing more", steps: []Step{reboot, metal3}, wantCreate: -1,
			records:  []Record{rec(reboot, ago(time.Hour), ago(50*time.Minute)), rec(metal3, ago(50*time.Minute), ago(30*time.Minute))},
			requests: []Request{req(reboot, ago(time.Hour)), req(metal3, ago(50*time.Minute))}, wantRecords: 2},
		{name: "single template without timeout: waits as long as it takes", steps: []Step{noLimit}, wantCreate: -1,
			records: []Record{rec(noLimit, ago(48*time.Hour), time.Time{})}, requests: []Request{req(noLimit, ago(48*time.Hour))}, wantRecords: 1},
		{name: "single template gave up (Succeeded=False): exhausted, the request left unmarked as its remediator left it",
			steps: []Step{noLimit}, wantCreate: -1, records: []Record{rec(noLimit, ago(time.Hour), time.Time{})},
			requests: []Request{req(noLimit, ago(time.Hour), failed)}, wantExhausted: true, wantRecords: 1},
		{name: "current request being deleted: wait", steps: []Step{reboot, metal3}, wantCreate: -1,
			records: []Record{rec(reboot, ago(time.Minute), time.Time{})}, requests: []Request{req(reboot, ago(time.Minute), deleting)}, wantRecords: 1},
		{name: "step removed from the spec: given up, the next one starts", steps: []Step{metal3},
			records: []Record{rec(reboot, ago(time.Minute), time.Time{})}, requests: []Request{req(reboot, ago(time.Minute))},
			wantTimeOut: 1, wantCreate: 0, wantRecords: 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			records := slices.Clone(tt.records)
			w := Escalate(tt.steps, "m", tt.records, tt.requests, walkT0)
			if tt.wantCreate < 0 {
				g.Expect(w.Create).To(BeNil())
			} else {
				g.Expect(w.Create).NotTo(BeNil())
				g.Expect(w.Create.Step).To(Equal(tt.wantCreate))
				g.Expect(w.Create.First).To(Equal(tt.wantFirst))
				g.Expect(w.Create.Name).To(Equal(cmp.Or(tt.wantName, "m")))
			}
			g.Expect(w.WaitingFor).To(Equal(tt.wantWaitingFor))
			g.Expect(w.WaitCheck).To(Equal(tt.wantWaitCheck))
			g.Expect(w.Overdue).To(HaveLen(tt.wantOverdue))
			g.Expect(w.TimeOut).To(HaveLen(tt.wantTimeOut))
			g.Expect(w.Delete).To(HaveLen(tt.wantDelete))
			g.Expect(w.Exhausted && w.Ended != nil).To(Equal(tt.wantExhausted))
			g.Expect(w.Records).To(HaveLen(tt.wantRecords))
			g.Expect(tt.records).To(Equal(records), "the status's records are not modified")
		})
	}
}
