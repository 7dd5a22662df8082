package bmcaccess

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/metalheal/metalheal/api/v1alpha1"
)

// The BMC transform keeps everything the inventory and the remediator read from the cache (spec,
// conditions, power state, generation) and drops the record of remediations and the managed fields.
func TestSlimBMCKeepsWhatControllersRead(t *testing.T) {
	g := NewWithT(t)
	b := &v1alpha1.BMC{
		ObjectMeta: metav1.ObjectMeta{Name: "worker-1", Namespace: "metalheal-system", Generation: 3, ResourceVersion: "42",
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
		Spec: v1alpha1.BMCSpec{NodeName: "worker-1", Address: "redfish://10.0.0.5/redfish/v1/Systems/1",
			CredentialsSecretRef: v1alpha1.SecretReference{Name: "bmc-credentials"}},
		Status: v1alpha1.BMCStatus{PowerState: v1alpha1.PowerOn, ObservedGeneration: 3,
			Conditions:         []metav1.Condition{{Type: v1alpha1.ConditionReachable, Status: metav1.ConditionTrue}},
			RecentRemediations: []v1alpha1.RemediationRecord{{Name: "worker-1", Result: v1alpha1.RemediationSucceeded}}},
	}
	want := b.DeepCopy()
	want.ManagedFields, want.Status.RecentRemediations = nil, nil

	got, err := SlimBMC(b)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal(want))

	tombstone := cache.DeletedFinalStateUnknown{Key: "metalheal-system/worker-1", Obj: b}
	got, err = SlimBMC(tombstone)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal(tombstone))
}
