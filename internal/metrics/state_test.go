package metrics

import (
	"context"
	"errors"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/metalheal/metalheal/api/v1alpha1"
)

func TestHealthCheckCollector(t *testing.T) {
	closed := make(chan struct{})
	close(closed)
	for _, tc := range []struct {
		name    string
		elected <-chan struct{}
		states  []CheckState
		err     error
		want    string
	}{
		{
			name:    "a check in a storm, one without storms (a MachineHealthCheck), one not reported yet",
			elected: closed,
			states: []CheckState{
				{Name: "workers", Targets: ptr.To[int32](5), Healthy: ptr.To[int32](2), InFlight: 0,
					Storm: &StormState{Active: true, ActiveFor: 90 * time.Second, Cooldown: time.Minute}},
				{Name: "ns/md-0", Targets: ptr.To[int32](3), Healthy: ptr.To[int32](3), RemediationAllowed: true, InFlight: 1, WouldRemediate: 2},
				{Name: "new", Disabled: true},
			},
			want: `
metalheal_healthcheck_disabled{checker="c",healthcheck="new"} 1
metalheal_healthcheck_disabled{checker="c",healthcheck="ns/md-0"} 0
metalheal_healthcheck_disabled{checker="c",healthcheck="workers"} 0
metalheal_healthcheck_healthy_targets{checker="c",healthcheck="ns/md-0"} 3
metalheal_healthcheck_healthy_targets{checker="c",healthcheck="workers"} 2
metalheal_healthcheck_remediation_allowed{checker="c",healthcheck="new"} 0
metalheal_healthcheck_remediation_allowed{checker="c",healthcheck="ns/md-0"} 1
metalheal_healthcheck_remediation_allowed{checker="c",healthcheck="workers"} 0
metalheal_healthcheck_remediations_in_flight{checker="c",healthcheck="new"} 0
metalheal_healthcheck_remediations_in_flight{checker="c",healthcheck="ns/md-0"} 1
metalheal_healthcheck_remediations_in_flight{checker="c",healthcheck="workers"} 0
metalheal_healthcheck_storm_active_seconds{checker="c",healthcheck="workers"} 90
metalheal_healthcheck_storm_active{checker="c",healthcheck="workers"} 1
metalheal_healthcheck_storm_cooldown_seconds{checker="c",healthcheck="workers"} 60
metalheal_healthcheck_targets{checker="c",healthcheck="ns/md-0"} 3
metalheal_healthcheck_targets{checker="c",healthcheck="workers"} 5
metalheal_healthcheck_would_remediate{checker="c",healthcheck="new"} 0
metalheal_healthcheck_would_remediate{checker="c",healthcheck="ns/md-0"} 2
metalheal_healthcheck_would_remediate{checker="c",healthcheck="workers"} 0
metalheal_state_collect_errors{collector="c"} 0
`,
		},
		{name: "not elected: nothing", elected: make(chan struct{}), states: []CheckState{{Name: "workers"}}, want: ""},
		{name: "the cache cannot be read: the error gauge only", elected: closed, err: errors.New("not synced"),
			want: "metalheal_state_collect_errors{collector=\"c\"} 1\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			c := &healthChecks{sources: map[string]source{}}
			c.sources["c"] = source{elected: tc.elected, list: func(context.Context) ([]CheckState, error) { return tc.states, tc.err }}
			var got strings.Builder
			lines, err := collectLines(c)
			g.Expect(err).NotTo(HaveOccurred())
			for _, l := range lines {
				got.WriteString(l + "\n")
			}
			g.Expect(got.String()).To(Equal(strings.TrimPrefix(tc.want, "\n")))
		})
	}
}

// collectLines gathers c and returns its samples as sorted text lines.
func collectLines(c *healthChecks) ([]string, error) {
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		return nil, err
	}
	families, err := reg.Gather()
	if err != nil {
		return nil, err
	}
	var lines []string
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"=\""+l.GetValue()+"\"")
			}
			lines = append(lines, f.GetName()+"{"+strings.Join(labels, ",")+"} "+strconv.FormatFloat(m.GetGauge().GetValue(), 'g', -1, 64))
		}
	}
	sort.Strings(lines)
	return lines, nil
}

// The allowed gauge reads the budget and the storm together: a storm's cooldown (the budget met again,
// StormActive still True) holds remediation back, so it is 0 then.
func TestFromConditionsAllowed(t *testing.T) {
	at := metav1.NewTime(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	cond := func(typ string, s metav1.ConditionStatus) metav1.Condition {
		return metav1.Condition{Type: typ, Status: s, LastTransitionTime: at}
	}
	for _, tc := range []struct {
		name  string
		conds []metav1.Condition
		want  bool
	}{
		{"within budget, no storm", []metav1.Condition{cond(v1alpha1.ConditionRemediationAllowed, metav1.ConditionTrue),
			cond(v1alpha1.ConditionStormActive, metav1.ConditionFalse)}, true},
		{"over budget: the storm", []metav1.Condition{cond(v1alpha1.ConditionRemediationAllowed, metav1.ConditionFalse),
			cond(v1alpha1.ConditionStormActive, metav1.ConditionTrue)}, false},
		{"budget met again, storm cooling down", []metav1.Condition{cond(v1alpha1.ConditionRemediationAllowed, metav1.ConditionTrue),
			cond(v1alpha1.ConditionStormActive, metav1.ConditionTrue)}, false},
		{"not reported yet", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(FromConditions(tc.conds, nil, at.Add(time.Minute)).RemediationAllowed).To(Equal(tc.want))
		})
	}
}

// AddCheckKind lists a kind of check from the reader at scrape time and reports each item's state.
func TestAddCheckKind(t *testing.T) {
	g := NewWithT(t)
	scheme := runtime.NewScheme()
	g.Expect(v1alpha1.AddToScheme(scheme)).To(Succeed())
	reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		&v1alpha1.NodeHealthCheck{ObjectMeta: metav1.ObjectMeta{Name: "a"}},
		&v1alpha1.NodeHealthCheck{ObjectMeta: metav1.ObjectMeta{Name: "b"}}).Build()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	closed := make(chan struct{})
	close(closed)
	AddCheckKind("test-kind", reader, clocktesting.NewFakePassiveClock(now), closed,
		func(l *v1alpha1.NodeHealthCheckList) []v1alpha1.NodeHealthCheck { return l.Items },
		func(c *v1alpha1.NodeHealthCheck, at time.Time) CheckState {
			g.Expect(at).To(Equal(now))
			return CheckState{Name: c.Name, InFlight: len(c.Name)}
		})
	t.Cleanup(func() {
		checks.mu.Lock()
		defer checks.mu.Unlock()
		delete(checks.sources, "test-kind")
	})
	checks.mu.Lock()
	src := checks.sources["test-kind"]
	checks.mu.Unlock()
	states, err := src.list(context.Background())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(states).To(ConsistOf(HaveField("Name", "a"), HaveField("Name", "b")))
}

// TestCheckStateCount: a target's entry counts the same for both kinds: its requests not timed out are
// open (a step that timed out, or the last one that ended with the target still unhealthy, is not), and a
// target in dry run is one a check would remediate.
func TestCheckStateCount(t *testing.T) {
	g := NewWithT(t)
	ended := metav1.Now()
	var st CheckState
	st.Count(v1alpha1.RemediationProgress{Remediations: []v1alpha1.RequestRecord{{Kind: "A", TimedOut: &ended}, {Kind: "B"}}})
	st.Count(v1alpha1.RemediationProgress{Remediations: []v1alpha1.RequestRecord{{Kind: "A", TimedOut: &ended}}}) // exhausted
	st.Count(v1alpha1.RemediationProgress{SkipReason: v1alpha1.SkipDryRun})
	st.Count(v1alpha1.RemediationProgress{SkipReason: "ControlPlaneBusy"})
	g.Expect(st.InFlight).To(Equal(1))
	g.Expect(st.WouldRemediate).To(Equal(1))
}
