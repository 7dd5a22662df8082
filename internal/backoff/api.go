package backoff

import (
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/metalheal/metalheal/api/v1alpha1"
)

// The API's defaults, for objects stored before the field existed (the API server defaults it).
const (
	DefaultAfter   = 3
	DefaultWindow  = 6 * time.Hour
	DefaultInitial = 15 * time.Minute
	DefaultMax     = 2 * time.Hour
)

// PolicyOf turns a check's spec.remediationBackoff into a Policy; nil means the defaults.
func PolicyOf(b *v1alpha1.RemediationBackoff) Policy {
	p := Policy{After: DefaultAfter, Window: DefaultWindow, Initial: DefaultInitial, Max: DefaultMax}
	if b == nil {
		return p
	}
	if b.After != nil {
		p.After = int(*b.After)
	}
	if b.Window != nil {
		p.Window = b.Window.Duration
	}
	if b.Initial != nil {
		p.Initial = b.Initial.Duration
	}
	if b.Max != nil {
		p.Max = b.Max.Duration
	}
	return p
}

// Memory is a check's status.recentRemediations being rebuilt during one decision: the targets remediated
// within the window, what holds are in force, and which began now (for the event and metric).
type Memory struct {
	Policy Policy
	now    time.Time
	old    map[string]*v1alpha1.RecentRemediation
	starts map[string][]time.Time
	held   map[string]time.Time
}

// NewMemory starts from the status's list at now.
func NewMemory(p Policy, recent []v1alpha1.RecentRemediation, now time.Time) *Memory {
	m := &Memory{Policy: p, now: now, old: map[string]*v1alpha1.RecentRemediation{}, starts: map[string][]time.Time{},
		held: map[string]time.Time{}}
	for i := range recent {
		r := &recent[i]
		m.old[r.Name] = r
		for _, s := range r.Starts {
			m.starts[r.Name] = append(m.starts[r.Name], s.Time)
		}
	}
	return m
}

// Hold tells whether a new remediation of target must wait, until when, and whether that hold is new
// (not already in the status: the event and the metric are due). Decision carries the count and wait
// for messages.
func (m *Memory) Hold(target string) (d Decision, isNew bool) {
	d = Decide(m.Policy, m.starts[target], m.now)
	if d.Allowed {
		return d, false
	}
	m.held[target] = d.Until
	old := m.old[target]
	isNew = old == nil || old.BackoffUntil == nil || !old.BackoffUntil.Time.Truncate(time.Second).Equal(d.Until.Truncate(time.Second))
	return d, isNew
}

// Started records that target's remediation started at start (the first request of the remediation);
// recording the same start again changes nothing.
func (m *Memory) Started(target string, start time.Time) {
	m.starts[target] = Record(m.Policy, m.starts[target], start, m.now)
}

// Held is the number of targets held back by this decision.
func (m *Memory) Held() int { return len(m.held) }

// Status is the new status.recentRemediations: the targets with a start within the window or a hold,
// by name; nil when the back-off is off.
func (m *Memory) Status() []v1alpha1.RecentRemediation {
	if !m.Policy.Enabled() {
		return nil
	}
	var out []v1alpha1.RecentRemediation
	for name, starts := range m.starts {
		starts = Record(m.Policy, starts, time.Time{}, m.now)
		until, held := m.held[name]
		if old := m.old[name]; !held && old != nil && old.BackoffUntil != nil && m.now.Before(old.BackoffUntil.Time) {
			// A hold said before that this decision did not look at (the target was held back for another
			// reason: a storm, a pause): it stands, and is not said again when it is looked at next.
			until, held = old.BackoffUntil.Time, true
		}
		if len(starts) == 0 && !held {
			continue
		}
		r := v1alpha1.RecentRemediation{Name: name}
		for _, s := range starts {
			r.Starts = append(r.Starts, metav1.NewTime(s))
		}
		if held {
			r.BackoffUntil = &metav1.Time{Time: until.Truncate(time.Second)}
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b v1alpha1.RecentRemediation) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// HoldMessage says why a target's next remediation waits, for its status entry's skipMessage (both kinds
// of check write it the same way).
func (m *Memory) HoldMessage(d Decision) string {
	return fmt.Sprintf("Remediated %d times within %s: the next remediation waits %s after the last, until %s "+
		"(remediationBackoff)", d.Count, m.Policy.Window, d.Wait, d.Until.UTC().Format(time.RFC3339))
}
