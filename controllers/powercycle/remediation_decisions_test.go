package powercycle

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/metalheal/metalheal/api/v1alpha1"
)

func TestSpecDefaults(t *testing.T) {
	for name, tc := range map[string]struct {
		in   v1alpha1.PowerCycleRemediationSpec
		want effectiveSpec
	}{
		"empty spec: the CRD's defaults": {
			want: effectiveSpec{strategy: v1alpha1.StrategyReboot, deleteAfterRetries: 3, powerOffTimeout: 120 * time.Second,
				powerOnTimeout: 600 * time.Second, backoffInitial: 30 * time.Second, backoffMax: 10 * time.Minute, outOfServiceTaint: true},
		},
		"everything set": {
			in: v1alpha1.PowerCycleRemediationSpec{Strategy: v1alpha1.StrategyEscalate, DeleteAfterRetries: new(int32(7)),
				PowerOffTimeoutSeconds: 30, PowerOnTimeoutSeconds: 900, OutOfServiceTaint: new(false),
				RetryBackoff: &v1alpha1.RetryBackoff{Initial: metav1.Duration{Duration: 5 * time.Second}, Max: metav1.Duration{Duration: time.Minute}}},
			want: effectiveSpec{strategy: v1alpha1.StrategyEscalate, deleteAfterRetries: 7, powerOffTimeout: 30 * time.Second,
				powerOnTimeout: 900 * time.Second, backoffInitial: 5 * time.Second, backoffMax: time.Minute, outOfServiceTaint: false},
		},
		"a max below the initial wait is raised to it": {
			in: v1alpha1.PowerCycleRemediationSpec{RetryBackoff: &v1alpha1.RetryBackoff{
				Initial: metav1.Duration{Duration: 20 * time.Minute}, Max: metav1.Duration{Duration: time.Minute}}},
			want: effectiveSpec{strategy: v1alpha1.StrategyReboot, deleteAfterRetries: 3, powerOffTimeout: 120 * time.Second,
				powerOnTimeout: 600 * time.Second, backoffInitial: 20 * time.Minute, backoffMax: 20 * time.Minute, outOfServiceTaint: true},
		},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(specOf(&v1alpha1.PowerCycleRemediation{Spec: tc.in})).To(Equal(tc.want))
		})
	}
}

func TestRetryBackoffDoublesUpToMax(t *testing.T) {
	s := effectiveSpec{backoffInitial: 30 * time.Second, backoffMax: 10 * time.Minute}
	for _, tc := range []struct {
		failures int32
		want     time.Duration
	}{
		{1, 30 * time.Second},
		{2, time.Minute},
		{3, 2 * time.Minute},
		{4, 4 * time.Minute},
		{5, 8 * time.Minute},
		{6, 10 * time.Minute},
		{60, 10 * time.Minute},
		{1 << 30, 10 * time.Minute},
	} {
		t.Run(time.Duration(tc.failures).String(), func(t *testing.T) {
			NewWithT(t).Expect(retryBackoff(s, tc.failures)).To(Equal(tc.want))
		})
	}
}

func TestAfterFailure(t *testing.T) {
	now := epoch
	base := effectiveSpec{deleteAfterRetries: 3, backoffInitial: 30 * time.Second, backoffMax: 10 * time.Minute}
	with := func(strategy v1alpha1.Strategy) effectiveSpec { s := base; s.strategy = strategy; return s }
	for name, tc := range map[string]struct {
		spec      effectiveSpec
		failures  int32
		wantPhase v1alpha1.PowerCyclePhase
		wantRetry time.Time
	}{
		"reboot retries":                    {with(v1alpha1.StrategyReboot), 1, v1alpha1.PhaseRetrying, now.Add(30 * time.Second)},
		"reboot retries forever":            {with(v1alpha1.StrategyReboot), 100, v1alpha1.PhaseRetrying, now.Add(10 * time.Minute)},
		"escalate retries below the limit":  {with(v1alpha1.StrategyEscalate), 2, v1alpha1.PhaseRetrying, now.Add(time.Minute)},
		"escalate escalates at the limit":   {with(v1alpha1.StrategyEscalate), 3, v1alpha1.PhaseEscalating, time.Time{}},
		"power-off keeps trying to fence":   {with(v1alpha1.StrategyPowerOff), 5, v1alpha1.PhaseRetrying, now.Add(8 * time.Minute)},
		"escalate with one allowed failure": {effectiveSpec{strategy: v1alpha1.StrategyEscalate, deleteAfterRetries: 1}, 1, v1alpha1.PhaseEscalating, time.Time{}},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			phase, retry := afterFailure(tc.spec, tc.failures, now)
			g.Expect(phase).To(Equal(tc.wantPhase))
			g.Expect(retry).To(Equal(tc.wantRetry))
		})
	}
}

func TestGrowingWait(t *testing.T) {
	since := epoch
	for _, tc := range []struct {
		elapsed, want time.Duration
	}{
		{0, 5 * time.Second},
		{3 * time.Second, 5 * time.Second},
		{5 * time.Second, 5 * time.Second},
		{10 * time.Second, 10 * time.Second},
		{40 * time.Second, 40 * time.Second},
		{5 * time.Minute, 2 * time.Minute},
		{-time.Minute, 5 * time.Second}, // a clock that went back
	} {
		t.Run(tc.elapsed.String(), func(t *testing.T) {
			NewWithT(t).Expect(growingWait(since, since.Add(tc.elapsed), 5*time.Second, 2*time.Minute)).To(Equal(tc.want))
		})
	}
}

func TestLastSend(t *testing.T) {
	deadline := epoch.Add(time.Hour)
	for _, tc := range []struct {
		name          string
		timeout, poll time.Duration
		want          time.Time
	}{
		{"a poll interval before the deadline", 2 * time.Minute, 5 * time.Second, deadline.Add(-5 * time.Second)},
		{"half of a timeout shorter than two intervals", 6 * time.Second, 5 * time.Second, deadline.Add(-3 * time.Second)},
		{"the shortest timeout the API allows", 5 * time.Second, 5 * time.Second, deadline.Add(-2500 * time.Millisecond)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(lastSend(deadline, tc.timeout, tc.poll)).To(Equal(tc.want))
		})
	}
}

func TestNodeReadySince(t *testing.T) {
	powerOn := epoch.Add(time.Hour)
	ready := func(status corev1.ConditionStatus, heartbeat, transition time.Time) *corev1.Node {
		return &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse},
			{Type: corev1.NodeReady, Status: status, LastHeartbeatTime: metav1.NewTime(heartbeat), LastTransitionTime: metav1.NewTime(transition)},
		}}}
	}
	for name, tc := range map[string]struct {
		node *corev1.Node
		want bool
	}{
		"Ready, reported after the power-on":         {ready(corev1.ConditionTrue, powerOn.Add(time.Minute), powerOn.Add(time.Minute)), true},
		"Ready, heartbeat after the power-on":        {ready(corev1.ConditionTrue, powerOn.Add(time.Minute), epoch), true},
		"Ready, reported in the power-on's second":   {ready(corev1.ConditionTrue, powerOn.Add(300*time.Millisecond), epoch), true},
		"Ready, but said before the host was cycled": {ready(corev1.ConditionTrue, powerOn.Add(-time.Second), epoch), false},
		"NotReady after the power-on":                {ready(corev1.ConditionFalse, powerOn.Add(time.Minute), powerOn.Add(time.Minute)), false},
		"Unknown":                                    {ready(corev1.ConditionUnknown, powerOn.Add(time.Minute), powerOn.Add(time.Minute)), false},
		"no Ready condition":                         {&corev1.Node{}, false},
	} {
		t.Run(name, func(t *testing.T) {
			NewWithT(t).Expect(nodeReadySince(tc.node, powerOn.Add(500*time.Millisecond))).To(Equal(tc.want))
		})
	}
}

func TestHeldByOwner(t *testing.T) {
	owned := func(apiVersion string) *v1alpha1.PowerCycleRemediation {
		return &v1alpha1.PowerCycleRemediation{ObjectMeta: metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{
			{APIVersion: "v1", Kind: "Node", Name: "worker-1"}, {APIVersion: apiVersion, Kind: "NodeHealthCheck", Name: "workers"},
		}}}
	}
	medik8s, metalheal := owned("remediation.medik8s.io/v1alpha1"), owned(v1alpha1.GroupVersion.String())
	for name, tc := range map[string]struct {
		pcr    *v1alpha1.PowerCycleRemediation
		holder string
		want   bool
	}{
		"medik8s' check holds it":                           {medik8s, "NodeHealthCheck-workers", true},
		"the owning Node's holder form":                     {medik8s, "Node-worker-1", true},
		"medik8s' check of another name":                    {medik8s, "NodeHealthCheck-others", false},
		"metalheal's check of the same name, not the owner": {medik8s, "NodeHealthCheck.remediation.metalheal.io-workers", false},
		"metalheal's check holds it":                        {metalheal, "NodeHealthCheck.remediation.metalheal.io-workers", true},
		"medik8s' check of the same name, not the owner":    {metalheal, "NodeHealthCheck-workers", false},
		"node-maintenance":                                  {metalheal, "node-maintenance", false},
		"the remediation itself is not its owner":           {metalheal, "PowerCycleRemediation-worker-1", false},
		"no holder": {metalheal, "", false},
	} {
		t.Run(name, func(t *testing.T) {
			NewWithT(t).Expect(heldByOwner(tc.pcr, tc.holder)).To(Equal(tc.want))
		})
	}
}

func TestOwnerMachine(t *testing.T) {
	for name, tc := range map[string]struct {
		refs []metav1.OwnerReference
		want string
	}{
		"Cluster API v1beta2 Machine": {[]metav1.OwnerReference{{APIVersion: "cluster.x-k8s.io/v1beta2", Kind: "Machine", Name: "m1"}}, "m1"},
		"Cluster API v1beta1 Machine": {[]metav1.OwnerReference{{APIVersion: "cluster.x-k8s.io/v1beta1", Kind: "Machine", Name: "m2"}}, "m2"},
		"after other owners":          {[]metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "n"}, {APIVersion: "cluster.x-k8s.io/v1beta2", Kind: "Machine", Name: "m3"}}, "m3"},
		"OpenShift's Machine API":     {[]metav1.OwnerReference{{APIVersion: "machine.openshift.io/v1beta1", Kind: "Machine", Name: "m4"}}, ""},
		"a Node only":                 {[]metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "n"}}, ""},
		"no owner":                    {nil, ""},
	} {
		t.Run(name, func(t *testing.T) {
			got := ownerMachine(&v1alpha1.PowerCycleRemediation{ObjectMeta: metav1.ObjectMeta{OwnerReferences: tc.refs}})
			name := ""
			if got != nil {
				name = got.Name
			}
			NewWithT(t).Expect(name).To(Equal(tc.want))
		})
	}
}

func TestRemediationNodeKey(t *testing.T) {
	for name, tc := range map[string]struct {
		pcr  v1alpha1.PowerCycleRemediation
		want string
	}{
		"resolved": {v1alpha1.PowerCycleRemediation{ObjectMeta: metav1.ObjectMeta{Name: "m1",
			Annotations: map[string]string{v1alpha1.AnnotationNodeName: "a"}}, Status: v1alpha1.PowerCycleRemediationStatus{NodeName: "n1"}}, "n1"},
		"annotated": {v1alpha1.PowerCycleRemediation{ObjectMeta: metav1.ObjectMeta{Name: "m1",
			Annotations: map[string]string{v1alpha1.AnnotationNodeName: "a"}}}, "a"},
		"named after the node": {v1alpha1.PowerCycleRemediation{ObjectMeta: metav1.ObjectMeta{Name: "worker-1"}}, "worker-1"},
	} {
		t.Run(name, func(t *testing.T) {
			NewWithT(t).Expect(remediationNodeKey(&tc.pcr)).To(Equal(tc.want))
		})
	}
}

func TestTruncateKeepsCharactersWhole(t *testing.T) {
	for name, tc := range map[string]struct {
		in   string
		n    int
		want string
	}{
		"short enough":            {"power-off not confirmed", 64, "power-off not confirmed"},
		"cut":                     {"abcdefghij", 8, "abcde..."},
		"not inside a character":  {"ab€€€", 7, "ab..."},
		"on a character boundary": {"ab€€€", 8, "ab€..."},
		"exactly the limit":       {"abcdefgh", 8, "abcdefgh"},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			got := truncate(tc.in, tc.n)
			g.Expect(got).To(Equal(tc.want))
			g.Expect(len(got)).To(BeNumerically("<=", tc.n))
		})
	}
}
