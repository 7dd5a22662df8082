package powercycle

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/testca"
)

// The remediator's scenarios (remediation_test.go), continued: a BMC's CA bundle.
var _ = Describe("Remediation", func() {
	// A BMC whose CA bundle is missing: the remediation waits in Pending (BMCReady=False CABundleNotFound,
	// naming the ConfigMap) without taking the lease, tainting the node or calling the BMC, and proceeds once
	// the bundle exists.
	It("BMC CA bundle missing", func(ctx SpecContext) {
		w, hosts := fakeHosts(ctx)
		node := w.node(ctx, "worker-ca", nil)
		b := &v1alpha1.BMC{
			ObjectMeta: metav1.ObjectMeta{Name: node + "-bmc", Namespace: w.ns},
			Spec: v1alpha1.BMCSpec{NodeName: node, Address: fakeAddress(node),
				CredentialsSecretRef: v1alpha1.SecretReference{Name: node + "-bmc-credentials"},
				CABundleRef:          &v1alpha1.CABundleReference{Kind: v1alpha1.CABundleConfigMap, Name: "site-ca"}},
		}
		w.must(w.c.Create(ctx, b))
		w.secret(ctx, b.Spec.CredentialsSecretRef.Name, credentials)
		w.waitCached(ctx, b, func(client.Object) bool { return true })
		key := w.nhcRemediation(ctx, node, spec(reboot, 3))

		steps := w.drive(ctx, key, same(w.reconciler()), nil, func(s []step) bool { return len(s) == 3 })

		Expect(phases(steps)).To(Equal([]v1alpha1.PowerCyclePhase{v1alpha1.PhasePending}))
		c := conditionOf(w.get(ctx, key), v1alpha1.ConditionBMCReady)
		Expect(c).To(MatchFields(v1alpha1.ReasonCABundleNotFound, metav1.ConditionFalse))
		Expect(c.Message).To(ContainSubstring(`ConfigMap "site-ca" does not exist`))
		Expect(w.lease(ctx, node)).To(BeNil(), "no lease while the BMC cannot be used")
		Expect(w.taintKeys(ctx, node)).To(BeEmpty())
		Expect(hosts.Driver(fakeAddress(node)).Calls()).To(BeEmpty())

		ca, err := testca.New("site CA")
		Expect(err).NotTo(HaveOccurred())
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "site-ca", Namespace: w.ns}, Data: map[string]string{"ca.crt": string(ca.PEM)}}
		w.must(w.c.Create(ctx, cm))
		w.waitCached(ctx, cm, func(client.Object) bool { return true })
		w.drive(ctx, key, same(w.reconciler()), w.kubeletOnPowerOn(ctx, node, always), untilSettled)
		Expect(w.get(ctx, key).Status.Phase).To(Equal(v1alpha1.PhaseSucceeded))
		Expect(hosts.Driver(fakeAddress(node)).Calls()).NotTo(BeEmpty())
	})
})
