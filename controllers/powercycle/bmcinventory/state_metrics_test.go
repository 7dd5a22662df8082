package bmcinventory

import (
	"testing"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/metalheal/metalheal/api/v1alpha1"
)

func TestStateCollector(t *testing.T) {
	g := NewWithT(t)
	bmc := func(ns, name string, reachable, creds metav1.ConditionStatus) client.Object {
		b := &v1alpha1.BMC{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		if reachable != "" {
			b.Status.Conditions = append(b.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionReachable, Status: reachable})
		}
		if creds != "" {
			b.Status.Conditions = append(b.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionCredentialsValid, Status: creds})
		}
		return b
	}
	scheme := runtime.NewScheme()
	g.Expect(v1alpha1.AddToScheme(scheme)).To(Succeed())
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		bmc("mh", "ok", metav1.ConditionTrue, metav1.ConditionTrue),
		bmc("mh", "down", metav1.ConditionFalse, metav1.ConditionUnknown),
		bmc("mh", "badpass", metav1.ConditionTrue, metav1.ConditionFalse),
		bmc("mh", "unchecked", "", ""),
		bmc("elsewhere", "down", metav1.ConditionFalse, metav1.ConditionFalse), // not the manager's: ignored
	).Build()
	col := NewStateCollector(c, "mh", nil)
	g.Expect(gaugeValue(t, col, "metalheal_bmcs")).To(Equal(4.0))
	g.Expect(gaugeValue(t, col, "metalheal_bmcs_unreachable")).To(Equal(1.0))
	g.Expect(gaugeValue(t, col, "metalheal_bmcs_credentials_invalid")).To(Equal(1.0))
}

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
