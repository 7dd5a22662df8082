package bmcinventory

import (
	"context"
	"net/url"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/testca"
	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
)

// newTestCA makes a private CA for one spec.
func newTestCA(name string) *testca.CA {
	ca, err := testca.New(name)
	Expect(err).NotTo(HaveOccurred())
	return ca
}

// startCASignedBMC serves a one-system Redfish mock over HTTPS, with a certificate ca signed, until the
// spec ends, and returns the mock and the BMC address of its system.
func startCASignedBMC(ca *testca.CA) (*redfishmock.Mock, string) {
	m := startBMCMock(redfishmock.New())
	srv, err := ca.NewTLSServer(m)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	Expect(err).NotTo(HaveOccurred())
	return m, "redfish+https://" + u.Host + m.SystemPath("1")
}

// createCABundle creates a ConfigMap or Secret holding pem under key ca.crt.
func createCABundle(ctx context.Context, ns string, kind v1alpha1.CABundleKind, name string, pem []byte) {
	meta := metav1.ObjectMeta{Namespace: ns, Name: name}
	if kind == v1alpha1.CABundleSecret {
		Expect(k8sClient.Create(ctx, &corev1.Secret{ObjectMeta: meta, Data: map[string][]byte{"ca.crt": pem}})).To(Succeed())
		return
	}
	Expect(k8sClient.Create(ctx, &corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{"ca.crt": string(pem)}})).To(Succeed())
}

// createBMCWithCABundle creates a BMC whose spec.caBundleRef is ref (nil: none), with credentials in Secret
// "creds".
func createBMCWithCABundle(ctx context.Context, ns, name, address string, ref *v1alpha1.CABundleReference) {
	b := &v1alpha1.BMC{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.BMCSpec{NodeName: "node-" + name, Address: address,
			CredentialsSecretRef: v1alpha1.SecretReference{Name: "creds"}, CABundleRef: ref},
	}
	Expect(k8sClient.Create(ctx, b)).To(Succeed())
}

var _ = Describe("BMC behind a private certificate authority", func() {
	var (
		ns string
		s  *bmcStepper
		ca *testca.CA
	)
	BeforeEach(func(ctx SpecContext) {
		ns = newNamespace(ctx)
		s = newBMCStepper(ns)
		ca = newTestCA("site CA")
		createBMCSecret(ctx, ns, "creds", bmcCredentials(goodPassword))
	})

	DescribeTable("reaches the BMC with the CA bundle, and says why and how to fix it without",
		func(ctx SpecContext, setup func(ctx context.Context) *v1alpha1.CABundleReference,
			wantReachable, wantCredentials string, wantMessages []string, wantEvent string) {
			_, address := startCASignedBMC(ca)
			createBMCWithCABundle(ctx, ns, "bmc-1", address, setup(ctx))
			res := s.reconcile(ctx, "bmc-1") // fails the spec on an error: a bad bundle is no crash loop
			Expect(res.RequeueAfter).To(BeNumerically(">", 0), "checked again in its slot")
			b := getBMC(ctx, ns, "bmc-1")
			Expect(bmcConditionState(b, v1alpha1.ConditionReachable)).To(Equal(wantReachable))
			Expect(bmcConditionState(b, v1alpha1.ConditionCredentialsValid)).To(Equal(wantCredentials))
			for _, m := range wantMessages {
				Expect(bmcConditionMessage(b, v1alpha1.ConditionReachable)).To(ContainSubstring(m))
			}
			Expect(bmcConditionMessage(b, v1alpha1.ConditionReachable)).NotTo(ContainSubstring(goodPassword))
			if wantEvent == "" {
				Expect(s.events()).To(BeEmpty())
			} else {
				Expect(s.events()).To(ConsistOf(HavePrefix(wantEvent)))
			}
		},
		Entry("the site CA's bundle in a ConfigMap",
			func(ctx context.Context) *v1alpha1.CABundleReference {
				createCABundle(ctx, ns, v1alpha1.CABundleConfigMap, "site-ca", ca.PEM)
				return &v1alpha1.CABundleReference{Kind: v1alpha1.CABundleConfigMap, Name: "site-ca"}
			},
			"True/CheckSucceeded", "True/CheckSucceeded", []string{"the host is On"}, ""),
		Entry("the site CA's bundle in a Secret",
			func(ctx context.Context) *v1alpha1.CABundleReference {
				createCABundle(ctx, ns, v1alpha1.CABundleSecret, "site-ca", ca.PEM)
				return &v1alpha1.CABundleReference{Kind: v1alpha1.CABundleSecret, Name: "site-ca"}
			},
			"True/CheckSucceeded", "True/CheckSucceeded", []string{"the host is On"}, ""),
		Entry("no bundle: the system's authorities do not know the site CA",
			func(context.Context) *v1alpha1.CABundleReference { return nil },
			"False/CertificateVerificationFailed", "Unknown/CertificateVerificationFailed",
			[]string{"TLS certificate verification failed", "set spec.caBundleRef", "spec.disableCertificateVerification: true",
				"certificate signed by unknown authority"},
			"Warning BMCMisconfigured CertificateVerificationFailed"),
		Entry("another CA's bundle",
			func(ctx context.Context) *v1alpha1.CABundleReference {
				createCABundle(ctx, ns, v1alpha1.CABundleConfigMap, "other-ca", newTestCA("another CA").PEM)
				return &v1alpha1.CABundleReference{Kind: v1alpha1.CABundleConfigMap, Name: "other-ca"}
			},
			"False/CertificateVerificationFailed", "Unknown/CertificateVerificationFailed",
			[]string{`against the CA bundle in ConfigMap "other-ca" (key "ca.crt")`, "spec.disableCertificateVerification: true"},
			"Warning BMCMisconfigured CertificateVerificationFailed"),
		Entry("the bundle's Secret is missing",
			func(context.Context) *v1alpha1.CABundleReference {
				return &v1alpha1.CABundleReference{Kind: v1alpha1.CABundleSecret, Name: "site-ca"}
			},
			"False/CABundleNotFound", "Unknown/CABundleNotFound",
			[]string{"the CA bundle that spec.caBundleRef names is missing", `Secret "site-ca" does not exist in namespace`},
			"Warning BMCMisconfigured CABundleNotFound"),
		Entry("the bundle's key is missing",
			func(ctx context.Context) *v1alpha1.CABundleReference {
				createCABundle(ctx, ns, v1alpha1.CABundleConfigMap, "site-ca", ca.PEM)
				return &v1alpha1.CABundleReference{Kind: v1alpha1.CABundleConfigMap, Name: "site-ca", Key: "bundle.pem"}
			},
			"False/CABundleNotFound", "Unknown/CABundleNotFound", []string{`has no key "bundle.pem"`},
			"Warning BMCMisconfigured CABundleNotFound"),
		Entry("the bundle holds no certificate",
			func(ctx context.Context) *v1alpha1.CABundleReference {
				createCABundle(ctx, ns, v1alpha1.CABundleConfigMap, "site-ca", []byte("not a certificate"))
				return &v1alpha1.CABundleReference{Kind: v1alpha1.CABundleConfigMap, Name: "site-ca"}
			},
			"False/CABundleInvalid", "Unknown/CABundleInvalid", []string{"no PEM-encoded certificate"},
			"Warning BMCMisconfigured CABundleInvalid"),
	)

	It("checks a healthy BMC at once when its bundle changes, and when the missing bundle appears", func(ctx SpecContext) {
		m, address := startCASignedBMC(ca)
		createCABundle(ctx, ns, v1alpha1.CABundleConfigMap, "site-ca", ca.PEM)
		createBMCWithCABundle(ctx, ns, "bmc-1", address, &v1alpha1.CABundleReference{Kind: v1alpha1.CABundleConfigMap, Name: "site-ca"})
		s.reconcile(ctx, "bmc-1")
		Expect(bmcConditionState(getBMC(ctx, ns, "bmc-1"), v1alpha1.ConditionReachable)).To(Equal("True/CheckSucceeded"))
		Expect(s.reconcile(ctx, "bmc-1").RequeueAfter).To(BeNumerically(">", 0), "healthy, nothing changed: not due")
		Expect(countMockRequests(m, "GET", m.SystemPath("1"))).To(Equal(1))

		By("replacing the bundle with another CA's: checked at once, before its slot, with a new driver")
		cm := &corev1.ConfigMap{}
		Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "site-ca"}, cm)).To(Succeed())
		cm.Data["ca.crt"] = string(newTestCA("another CA").PEM)
		Expect(k8sClient.Update(ctx, cm)).To(Succeed())
		s.reconcile(ctx, "bmc-1")
		Expect(bmcConditionState(getBMC(ctx, ns, "bmc-1"), v1alpha1.ConditionReachable)).To(Equal("False/CertificateVerificationFailed"))

		By("deleting the bundle: reported missing")
		Expect(k8sClient.Delete(ctx, cm)).To(Succeed())
		s.reconcile(ctx, "bmc-1")
		Expect(bmcConditionState(getBMC(ctx, ns, "bmc-1"), v1alpha1.ConditionReachable)).To(Equal("False/CABundleNotFound"))

		By("creating it again with the site CA: healthy")
		createCABundle(ctx, ns, v1alpha1.CABundleConfigMap, "site-ca", ca.PEM)
		s.reconcile(ctx, "bmc-1")
		b := getBMC(ctx, ns, "bmc-1")
		Expect(bmcConditionState(b, v1alpha1.ConditionReachable)).To(Equal("True/CheckSucceeded"))
		Expect(bmcConditionState(b, v1alpha1.ConditionCredentialsValid)).To(Equal("True/CheckSucceeded"))
	})
})

var _ = Describe("BMC behind a private certificate authority, in a running manager", func() {
	It("re-checks the BMCs using a bundle when it is created or changes, through the ConfigMap and Secret watches", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		startBMCManager(ctx, ns, Options{}, GinkgoLogr)
		ca := newTestCA("site CA")
		createBMCSecret(ctx, ns, "creds", bmcCredentials(goodPassword))
		_, address := startCASignedBMC(ca)
		createBMCWithCABundle(ctx, ns, "bmc-cm", address, &v1alpha1.CABundleReference{Kind: v1alpha1.CABundleConfigMap, Name: "site-ca"})
		createBMCWithCABundle(ctx, ns, "bmc-secret", address, &v1alpha1.CABundleReference{Kind: v1alpha1.CABundleSecret, Name: "site-ca"})
		state := func(name string) func() string {
			return func() string { return bmcConditionState(getBMC(ctx, ns, name), v1alpha1.ConditionReachable) }
		}
		Eventually(state("bmc-cm")).WithTimeout(bmcWait).Should(Equal("False/CABundleNotFound"))
		Eventually(state("bmc-secret")).WithTimeout(bmcWait).Should(Equal("False/CABundleNotFound"))

		// The next periodic checks are minutes away: only the watches can bring these in time.
		createCABundle(ctx, ns, v1alpha1.CABundleConfigMap, "site-ca", ca.PEM)
		Eventually(state("bmc-cm")).WithTimeout(bmcWait).Should(Equal("True/CheckSucceeded"))
		createCABundle(ctx, ns, v1alpha1.CABundleSecret, "site-ca", ca.PEM)
		Eventually(state("bmc-secret")).WithTimeout(bmcWait).Should(Equal("True/CheckSucceeded"))
		Eventually(func() []string { return eventsAbout(ctx, ns, "bmc-cm") }).WithTimeout(bmcWait).Should(ConsistOf(
			"Warning "+EventBMCMisconfigured, "Normal "+EventBMCRecovered))
	})
})
