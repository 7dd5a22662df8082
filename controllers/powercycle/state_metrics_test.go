package powercycle

import (
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/metalheal/metalheal/api/v1alpha1"
)

func TestRemediationStateCollector(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) *metav1.Time { return &metav1.Time{Time: now.Add(-d)} }
	pcr := func(name string, created time.Duration, phase v1alpha1.PowerCyclePhase, mutate ...func(*v1alpha1.PowerCycleRemediation)) client.Object {
		p := &v1alpha1.PowerCycleRemediation{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, CreationTimestamp: *ago(created)}}
		p.Status.Phase = phase
		if phase != "" {
			p.Status.LastTransitionTime = ago(created)
		}
		for _, m := range mutate {
			m(p)
		}
		return p
	}
	inPhaseFor := func(d time.Duration) func(*v1alpha1.PowerCycleRemediation) {
		return func(p *v1alpha1.PowerCycleRemediation) { p.Status.LastTransitionTime = ago(d) }
	}
	for _, tc := range []struct {
		name     string
		objs     []client.Object
		elected  bool
		byPhase  map[string]int
		oldest   float64
		overdue  int
		noSeries bool
	}{
		{name: "nothing: every phase at zero", elected: true, byPhase: map[string]int{}},
		{name: "not elected: no series", elected: false, objs: []client.Object{pcr("a", time.Minute, v1alpha1.PhasePending)}, noSeries: true},
		{
			name:    "phases counted, the oldest in flight, terminal ones not in flight",
			elected: true,
			objs: []client.Object{
				pcr("new", 5*time.Second, ""),
				pcr("pending", time.Minute, v1alpha1.PhasePending),
				pcr("off", 90*time.Second, v1alpha1.PhasePoweringOff),
				pcr("done", 10*time.Hour, v1alpha1.PhaseSucceeded),
				pcr("failed", 9*time.Hour, v1alpha1.PhaseFailed),
			},
			byPhase: map[string]int{"None": 1, "Pending": 1, "PoweringOff": 1, "Succeeded": 1, "Failed": 1},
			oldest:  90,
		},
		{
			name:    "overdue: past a step's own timeout and the grace",
			elected: true,
			objs: []client.Object{
				// PoweringOff's bound is powerOffTimeoutSeconds (120 by default) from the phase's start.
				pcr("off-within", time.Hour, v1alpha1.PhasePoweringOff, inPhaseFor(120*time.Second+overdueGrace)),
				pcr("off-past", time.Hour, v1alpha1.PhasePoweringOff, inPhaseFor(121*time.Second+overdueGrace)),
				pcr("off-short", time.Hour, v1alpha1.PhasePoweringOff, inPhaseFor(40*time.Second+overdueGrace), func(p *v1alpha1.PowerCycleRemediation) {
					p.Spec.PowerOffTimeoutSeconds = 30
				}),
				// WaitingForNode's bound is powerOnTimeoutSeconds from the power-on request.
				pcr("wait", time.Hour, v1alpha1.PhaseWaitingForNode, inPhaseFor(time.Minute), func(p *v1alpha1.PowerCycleRemediation) {
					p.Status.Attempts = []v1alpha1.PowerCycleAttempt{{Number: 1, PowerOnRequested: ago(11*time.Minute + overdueGrace)}}
				}),
				pcr("retry", time.Hour, v1alpha1.PhaseRetrying, func(p *v1alpha1.PowerCycleRemediation) {
					p.Status.NextRetryTime = ago(time.Second + overdueGrace)
				}),
				pcr("retry-soon", time.Hour, v1alpha1.PhaseRetrying, func(p *v1alpha1.PowerCycleRemediation) {
					p.Status.NextRetryTime = ago(-time.Minute)
				}),
				// Pending has no bound here (a lease held by someone else, a hand-over).
				pcr("pending", 5*time.Hour, v1alpha1.PhasePending),
				// Diagnosing and ShuttingDown: their own waits from the phase's start.
				pcr("dump-within", time.Hour, v1alpha1.PhaseDiagnosing, inPhaseFor(300*time.Second+overdueGrace), func(p *v1alpha1.PowerCycleRemediation) {
					p.Spec.DiagnosticInterrupt = &v1alpha1.DiagnosticInterrupt{TimeoutSeconds: 300}
				}),
				pcr("dump-past", time.Hour, v1alpha1.PhaseDiagnosing, inPhaseFor(301*time.Second+overdueGrace), func(p *v1alpha1.PowerCycleRemediation) {
					p.Spec.DiagnosticInterrupt = &v1alpha1.DiagnosticInterrupt{TimeoutSeconds: 300}
				}),
				pcr("shutdown-past", time.Hour, v1alpha1.PhaseShuttingDown, inPhaseFor(61*time.Second+overdueGrace), func(p *v1alpha1.PowerCycleRemediation) {
					p.Spec.GracefulShutdown = &v1alpha1.GracefulShutdown{TimeoutSeconds: 60}
				}),
			},
			byPhase: map[string]int{"Pending": 1, "Diagnosing": 2, "ShuttingDown": 1, "PoweringOff": 3, "WaitingForNode": 1, "Retrying": 2},
			oldest:  5 * 3600,
			overdue: 6,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			scheme := runtime.NewScheme()
			g.Expect(v1alpha1.AddToScheme(scheme)).To(Succeed())
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(tc.objs...).Build()
			elected := make(chan struct{})
			if tc.elected {
				close(elected)
			}
			col := NewRemediationStateCollector(c, clocktesting.NewFakePassiveClock(now), elected)
			if tc.noSeries {
				g.Expect(testutil.CollectAndCount(col)).To(BeZero())
				return
			}
			var want strings.Builder
			want.WriteString("# HELP metalheal_powercycle_remediations " + "PowerCycleRemediations by phase (None: not yet accepted). Every phase is reported, 0 when empty.\n# TYPE metalheal_powercycle_remediations gauge\n")
			for _, p := range remediationPhases {
				want.WriteString("metalheal_powercycle_remediations{phase=\"" + phaseLabel(p) + "\"} " + itoa(tc.byPhase[phaseLabel(p)]) + "\n")
			}
			g.Expect(testutil.CollectAndCompare(col, strings.NewReader(want.String()), "metalheal_powercycle_remediations")).To(Succeed())
			g.Expect(gaugeValue(t, col, "metalheal_powercycle_oldest_remediation_age_seconds")).To(Equal(tc.oldest))
			g.Expect(gaugeValue(t, col, "metalheal_powercycle_remediations_overdue")).To(Equal(float64(tc.overdue)))
		})
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// gaugeValue is the value of the single series name that c reports.
func gaugeValue(t *testing.T, c prometheus.Collector, name string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			if len(f.GetMetric()) != 1 {
				t.Fatalf("%s: %d series", name, len(f.GetMetric()))
			}
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("%s not reported", name)
	return 0
}
