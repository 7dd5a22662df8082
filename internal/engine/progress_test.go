package engine

import (
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/gates"
)

// TestOutcomeSent: what came of a request is what the target's status entry records, the same for both
// kinds: a request made is recorded as it went out (its name, namespace and time), a step started again
// keeps its record, a request that could not be sent leaves none, and a skip found while sending is the
// entry's skip, said once per reason and message.
func TestOutcomeSent(t *testing.T) {
	sentAt := walkT0.Add(40 * time.Millisecond)
	ref := Ref{APIVersion: pcrGVK.GroupVersion().String(), Kind: pcrGVK.Kind, Namespace: "ns", Name: "m"}
	admitted := func(status v1alpha1.RemediationProgress, again bool) *Outcome {
		p := &Pass{Steps: []Step{reboot}, Now: walkT0, Gate: Gate{Admission: gates.NewAdmission("self", nil, nil, walkT0)}}
		if again {
			status.Remediations = StatusRecords([]Record{rec(reboot, ago(time.Minute), time.Time{})})
		}
		o := p.Unhealthy(Target{Name: "m", Subject: "Machine", Why: "NodeReady=False", Status: status})
		p.Admit()
		if o.Create == nil || o.Create.Again != again {
			t.Fatalf("the pass asks for no request (again: %v): %+v", again, o.Walk)
		}
		return o
	}
	held := &Skip{Reason: gates.SkipLeaseHeldByOther, Message: `the lease is held by "maintenance"`}

	t.Run("made: recorded as it went out", func(t *testing.T) {
		g := NewWithT(t)
		o := admitted(v1alpha1.RemediationProgress{SkipReason: gates.SkipControlPlaneBusy}, false)
		g.Expect(o.Sent(Sent{Ref: ref, Created: true, At: sentAt}, "reboot")).To(BeNil())
		g.Expect(o.Entry.Remediations).To(ConsistOf(v1alpha1.RequestRecord{APIVersion: ref.APIVersion, Kind: ref.Kind,
			Namespace: "ns", Name: "m", TemplateName: "reboot", Started: metav1.NewTime(sentAt)}))
		g.Expect(o.Entry.SkipReason).To(BeEmpty(), "remediated: no skip")
	})
	t.Run("made again: the step keeps its record", func(t *testing.T) {
		g := NewWithT(t)
		o := admitted(v1alpha1.RemediationProgress{}, true)
		o.Sent(Sent{Ref: ref, Created: true, At: sentAt}, "reboot")
		g.Expect(o.Entry.Remediations).To(HaveLen(1))
		g.Expect(o.Entry.Remediations[0].Started.Time).To(Equal(ago(time.Minute)))
	})
	t.Run("not sent: no record", func(t *testing.T) {
		g := NewWithT(t)
		o := admitted(v1alpha1.RemediationProgress{}, false)
		g.Expect(o.Sent(Sent{Err: errors.New("connection refused"), At: sentAt}, "reboot")).To(BeNil())
		g.Expect(o.Entry.Remediations).To(BeEmpty())
	})
	t.Run("skipped: the entry's skip, said once", func(t *testing.T) {
		g := NewWithT(t)
		o := admitted(v1alpha1.RemediationProgress{}, false)
		ev := o.Sent(Sent{Skip: held, At: sentAt}, "reboot")
		g.Expect(ev).NotTo(BeNil())
		g.Expect(ev.Note).To(ContainSubstring(`held by "maintenance"`))
		g.Expect(o.Entry).To(Equal(v1alpha1.RemediationProgress{SkipReason: held.Reason, SkipMessage: held.Message}))
		again := admitted(o.Entry, false)
		g.Expect(again.Sent(Sent{Skip: held, At: sentAt}, "reboot")).To(BeNil(), "the status says so already")
	})
}
