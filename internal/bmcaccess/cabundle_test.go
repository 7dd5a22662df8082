package bmcaccess

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/testca"
	"github.com/metalheal/metalheal/pkg/bmc"
)

func siteCA(t *testing.T) *testca.CA {
	t.Helper()
	ca, err := testca.New("site CA")
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func withCABundle(b *v1alpha1.BMC, kind v1alpha1.CABundleKind, name, key string) *v1alpha1.BMC {
	b.Spec.CABundleRef = &v1alpha1.CABundleReference{Kind: kind, Name: name, Key: key}
	return b
}

func caConfigMap(name string, data map[string]string, binary map[string][]byte) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data, BinaryData: binary}
}

// The driver gets the PEM of the object and key the BMC names, from a Secret or a ConfigMap (data or
// binaryData); what cannot be read or used is an error of the bundle's kind, with the object named.
func TestForBMCPassesTheCABundle(t *testing.T) {
	ca := siteCA(t)
	pem := string(ca.PEM)
	tests := map[string]struct {
		objs     []client.Object
		bmc      *v1alpha1.BMC
		wantKind error
		wantMsg  string
	}{
		"ConfigMap, default key": {
			objs: []client.Object{caConfigMap("site-ca", map[string]string{"ca.crt": pem}, nil)},
			bmc:  withCABundle(newBMC("b", "w", addr1, "creds"), v1alpha1.CABundleConfigMap, "site-ca", ""),
		},
		"ConfigMap binaryData, named key": {
			objs: []client.Object{caConfigMap("site-ca", nil, map[string][]byte{"bundle.pem": ca.PEM})},
			bmc:  withCABundle(newBMC("b", "w", addr1, "creds"), v1alpha1.CABundleConfigMap, "site-ca", "bundle.pem"),
		},
		"Secret": {
			objs: []client.Object{newSecret("site-ca", map[string]string{"ca.crt": pem})},
			bmc:  withCABundle(newBMC("b", "w", addr1, "creds"), v1alpha1.CABundleSecret, "site-ca", ""),
		},
		"the credentials Secret holds the bundle too": {
			objs: []client.Object{newSecret("creds2", map[string]string{"username": "admin", "password": password, "ca.crt": pem})},
			bmc:  withCABundle(newBMC("b", "w", addr1, "creds2"), v1alpha1.CABundleSecret, "creds2", ""),
		},
		"missing ConfigMap": {
			bmc:      withCABundle(newBMC("b", "w", addr1, "creds"), v1alpha1.CABundleConfigMap, "site-ca", ""),
			wantKind: ErrCABundleNotFound, wantMsg: `ConfigMap "site-ca" does not exist in namespace "metalheal-system"`,
		},
		"a ConfigMap is not a Secret": {
			objs:     []client.Object{caConfigMap("site-ca", map[string]string{"ca.crt": pem}, nil)},
			bmc:      withCABundle(newBMC("b", "w", addr1, "creds"), v1alpha1.CABundleSecret, "site-ca", ""),
			wantKind: ErrCABundleNotFound, wantMsg: `Secret "site-ca" does not exist`,
		},
		"missing key": {
			objs:     []client.Object{caConfigMap("site-ca", map[string]string{"ca.pem": pem}, nil)},
			bmc:      withCABundle(newBMC("b", "w", addr1, "creds"), v1alpha1.CABundleConfigMap, "site-ca", ""),
			wantKind: ErrCABundleNotFound, wantMsg: `ConfigMap "site-ca" in namespace "metalheal-system" has no key "ca.crt"`,
		},
		"not a certificate": {
			objs:     []client.Object{caConfigMap("site-ca", map[string]string{"ca.crt": "hello"}, nil)},
			bmc:      withCABundle(newBMC("b", "w", addr1, "creds"), v1alpha1.CABundleConfigMap, "site-ca", ""),
			wantKind: ErrCABundleInvalid, wantMsg: `key "ca.crt" of ConfigMap "site-ca": invalid CA bundle: no PEM-encoded certificate`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			w := newWorld(t, append(tc.objs, goodSecret())...)
			_, err := w.access.ForBMC(context.Background(), tc.bmc)
			if tc.wantKind != nil {
				g.Expect(err).To(MatchError(tc.wantKind))
				g.Expect(err).To(MatchError(ContainSubstring(tc.wantMsg)))
				g.Expect(w.factory.all()).To(BeEmpty(), "no driver is built")
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(w.factory.all()).To(HaveLen(1))
			g.Expect(w.factory.all()[0].opts.CABundle).To(Equal(ca.PEM))
		})
	}
}

// A bundle that is edited, or that disappears, changes the driver: rebuilt with the new PEM, or dropped
// (closed) while it is missing.
func TestForBMCFollowsTheCABundle(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	first, second := siteCA(t), siteCA(t)
	cm := caConfigMap("site-ca", map[string]string{"ca.crt": string(first.PEM)}, nil)
	w := newWorld(t, goodSecret(), cm)
	b := withCABundle(newBMC("b", "w", addr1, "creds"), v1alpha1.CABundleConfigMap, "site-ca", "")

	d1, err := w.access.ForBMC(ctx, b)
	g.Expect(err).NotTo(HaveOccurred())
	again, err := w.access.ForBMC(ctx, b)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again).To(BeIdenticalTo(d1), "nothing changed: the cached driver")

	g.Expect(w.client.Get(ctx, client.ObjectKeyFromObject(cm), cm)).To(Succeed())
	cm.Data["ca.crt"] = string(second.PEM)
	g.Expect(w.client.Update(ctx, cm)).To(Succeed())
	d2, err := w.access.ForBMC(ctx, b)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(d2).NotTo(BeIdenticalTo(d1))
	builds := w.factory.all()
	g.Expect(builds).To(HaveLen(2))
	g.Expect(builds[1].opts.CABundle).To(Equal(second.PEM))
	g.Expect(builds[0].driver.CallCount(bmc.OperationClose)).To(Equal(1), "the replaced driver is closed")

	g.Expect(w.client.Delete(ctx, cm)).To(Succeed())
	_, err = w.access.ForBMC(ctx, b)
	g.Expect(err).To(MatchError(ErrCABundleNotFound))
	g.Expect(Reason(err)).To(Equal(v1alpha1.ReasonCABundleNotFound))
	g.Expect(builds[1].driver.CallCount(bmc.OperationClose)).To(Equal(1), "a driver verifying against a bundle that is gone is dropped")
}
