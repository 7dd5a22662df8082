package mhc

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"
	clusterv1beta1 "sigs.k8s.io/cluster-api/api/core/v1beta1"
)

// fakeDiscovery serves the resources of the group versions it holds and counts the calls.
type fakeDiscovery struct {
	served map[string][]string
	calls  int
}

func (f *fakeDiscovery) ServerResourcesForGroupVersion(gv string) (*metav1.APIResourceList, error) {
	f.calls++
	names, ok := f.served[gv]
	if !ok {
		return nil, apierrors.NewNotFound(schema.GroupResource{}, gv)
	}
	list := &metav1.APIResourceList{GroupVersion: gv}
	for _, n := range names {
		list.APIResources = append(list.APIResources, metav1.APIResource{Name: n})
	}
	return list, nil
}

func TestServedVersion(t *testing.T) {
	both := []string{"machines", "clusters"}
	for name, tc := range map[string]struct {
		served map[string][]string
		want   string
	}{
		"v1.11 and later: v1beta2 preferred": {served: map[string][]string{"cluster.x-k8s.io/v1beta2": both, "cluster.x-k8s.io/v1beta1": both}, want: "v1beta2"},
		"v1.10: v1beta1 only":                {served: map[string][]string{"cluster.x-k8s.io/v1beta1": both}, want: "v1beta1"},
		"no Cluster API":                     {served: map[string][]string{}, want: ""},
		"Machines without Clusters":          {served: map[string][]string{"cluster.x-k8s.io/v1beta2": {"machines"}}, want: ""},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			s := &servedVersion{disco: &fakeDiscovery{served: tc.served}, clock: clocktesting.NewFakeClock(time.Now()), recheck: time.Minute}
			g.Expect(s.get()).To(Equal(tc.want))
		})
	}
}

func TestServedVersionRechecksAfterTheInterval(t *testing.T) {
	g := NewWithT(t)
	clk := clocktesting.NewFakeClock(time.Now())
	d := &fakeDiscovery{served: map[string][]string{}}
	s := &servedVersion{disco: d, clock: clk, recheck: 30 * time.Second}
	g.Expect(s.get()).To(BeEmpty())
	calls := d.calls
	d.served["cluster.x-k8s.io/v1beta1"] = []string{"machines", "clusters"}
	clk.Step(29 * time.Second)
	g.Expect(s.get()).To(BeEmpty(), "remembered within the interval")
	g.Expect(d.calls).To(Equal(calls), "no discovery call within the interval")
	clk.Step(time.Second)
	g.Expect(s.get()).To(Equal("v1beta1"), "Cluster API installed meanwhile")
	d.served["cluster.x-k8s.io/v1beta2"] = []string{"machines", "clusters"}
	s.forget()
	g.Expect(s.get()).To(Equal("v1beta2"), "asked again at once after forget")
}

func TestV1beta1Condition(t *testing.T) {
	now := metav1.Now()
	for name, tc := range map[string]struct {
		in   metav1.Condition
		want clusterv1beta1.Condition
	}{
		"unhealthy Node": {in: metav1.Condition{Type: "HealthCheckSucceeded", Status: metav1.ConditionFalse, Reason: "UnhealthyNode", Message: "m", LastTransitionTime: now},
			want: clusterv1beta1.Condition{Type: "HealthCheckSucceeded", Status: corev1.ConditionFalse, Severity: clusterv1beta1.ConditionSeverityWarning, Reason: "UnhealthyNode", Message: "m", LastTransitionTime: now}},
		"Node deleted is v1.10's NodeNotFound": {in: metav1.Condition{Type: "HealthCheckSucceeded", Status: metav1.ConditionFalse, Reason: "NodeDeleted", LastTransitionTime: now},
			want: clusterv1beta1.Condition{Type: "HealthCheckSucceeded", Status: corev1.ConditionFalse, Severity: clusterv1beta1.ConditionSeverityWarning, Reason: "NodeNotFound", LastTransitionTime: now}},
		"the remediate annotation": {in: metav1.Condition{Type: "HealthCheckSucceeded", Status: metav1.ConditionFalse, Reason: "HasRemediateAnnotation", LastTransitionTime: now},
			want: clusterv1beta1.Condition{Type: "HealthCheckSucceeded", Status: corev1.ConditionFalse, Severity: clusterv1beta1.ConditionSeverityWarning, Reason: "HasRemediateMachineAnnotation", LastTransitionTime: now}},
		"healthy: no reason, no severity": {in: metav1.Condition{Type: "HealthCheckSucceeded", Status: metav1.ConditionTrue, Reason: "HealthCheckSucceeded", LastTransitionTime: now},
			want: clusterv1beta1.Condition{Type: "HealthCheckSucceeded", Status: corev1.ConditionTrue, LastTransitionTime: now}},
		"owner remediation": {in: metav1.Condition{Type: "OwnerRemediated", Status: metav1.ConditionFalse, Reason: "WaitingForRemediation", Message: "Waiting for remediation", LastTransitionTime: now},
			want: clusterv1beta1.Condition{Type: "OwnerRemediated", Status: corev1.ConditionFalse, Severity: clusterv1beta1.ConditionSeverityWarning, Reason: "WaitingForRemediation", Message: "Waiting for remediation", LastTransitionTime: now}},
	} {
		t.Run(name, func(t *testing.T) {
			NewWithT(t).Expect(v1beta1Condition(&tc.in)).To(Equal(tc.want))
		})
	}
}

func TestSetV1beta1ConditionKeepsTheTransitionTimeOfAnUnchangedStatus(t *testing.T) {
	g := NewWithT(t)
	then, later := metav1.NewTime(time.Unix(1000, 0)), metav1.NewTime(time.Unix(2000, 0))
	conds := clusterv1beta1.Conditions{{Type: "Ready", Status: corev1.ConditionTrue, LastTransitionTime: then},
		{Type: "HealthCheckSucceeded", Status: corev1.ConditionFalse, Reason: "UnhealthyNode", LastTransitionTime: then}}
	setV1beta1Condition(&conds, clusterv1beta1.Condition{Type: "HealthCheckSucceeded", Status: corev1.ConditionFalse, Reason: "NodeStartupTimeout", LastTransitionTime: later})
	g.Expect(conds).To(HaveLen(2))
	g.Expect(conds[1]).To(And(HaveField("Reason", "NodeStartupTimeout"), HaveField("LastTransitionTime", then)))
	setV1beta1Condition(&conds, clusterv1beta1.Condition{Type: "HealthCheckSucceeded", Status: corev1.ConditionTrue, LastTransitionTime: later})
	g.Expect(conds[1]).To(And(HaveField("Status", corev1.ConditionTrue), HaveField("LastTransitionTime", later)))
	setV1beta1Condition(&conds, clusterv1beta1.Condition{Type: "OwnerRemediated", Status: corev1.ConditionFalse, LastTransitionTime: later})
	g.Expect(conds).To(HaveLen(3))
}
