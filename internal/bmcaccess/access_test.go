package bmcaccess

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	fakeclient "sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/pkg/bmc"
	"github.com/metalheal/metalheal/pkg/bmc/fake"
)

const (
	ns = "metalheal-system"
	// password is distinctive, so that a leak cannot hide in a message.
	password = `Hunter2-"sw0rdf1sh/&`
)

// build is one driver a recordingFactory built.
type build struct {
	addr   bmc.Address
	creds  bmc.Credentials
	opts   bmc.Options
	driver *fake.Driver
}

// recordingFactory is a bmc.Factory that builds a fresh fake driver every time and remembers it.
type recordingFactory struct {
	mu     sync.Mutex
	builds []build
}

func (f *recordingFactory) New(addr bmc.Address, creds bmc.Credentials, opts bmc.Options) (bmc.Driver, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d := fake.New(bmc.PowerStateOn)
	f.builds = append(f.builds, build{addr: addr, creds: creds, opts: opts, driver: d})
	return d, nil
}

func (f *recordingFactory) all() []build {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]build(nil), f.builds...)
}

func scheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

func newBMC(name, node, address, secret string) *v1alpha1.BMC {
	return &v1alpha1.BMC{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), Generation: 1},
		Spec: v1alpha1.BMCSpec{
			NodeName:             node,
			Address:              address,
			CredentialsSecretRef: v1alpha1.SecretReference{Name: secret},
		},
	}
}

func newSecret(name string, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

// world is an Access over a fake client, with a registry whose Redfish driver is a recordingFactory.
type world struct {
	client  client.Client
	access  *Access
	factory *recordingFactory
}

func newWorld(t *testing.T, objs ...client.Object) *world {
	t.Helper()
	b := fakeclient.NewClientBuilder().WithScheme(scheme(t)).WithObjects(objs...)
	for _, ix := range indexes {
		b = b.WithIndex(&v1alpha1.BMC{}, ix.field, ix.extract)
	}
	c := b.Build()
	f := &recordingFactory{}
	reg := bmc.NewRegistry()
	if err := reg.Register(bmc.DriverRedfish, f.New); err != nil {
		t.Fatal(err)
	}
	return &world{client: c, access: New(c, ns, reg, Options{}), factory: f}
}

const addr1 = "redfish://10.0.0.1/redfish/v1/Systems/1"

func goodSecret() *corev1.Secret {
	return newSecret("creds", map[string]string{"username": "admin", "password": password + "\n"})
}

func TestForBMCBuildsTheDriverFromTheSecret(t *testing.T) {
	g := NewWithT(t)
	b := newBMC("bmc-1", "worker-1", addr1, "creds")
	b.Spec.DisableCertificateVerification = true
	w := newWorld(t, goodSecret())

	d, err := w.access.ForBMC(context.Background(), b)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(d.PowerState(context.Background())).To(Equal(bmc.PowerStateOn))

	builds := w.factory.all()
	g.Expect(builds).To(HaveLen(1))
	g.Expect(builds[0].addr.String()).To(Equal("redfish://10.0.0.1:443/redfish/v1/Systems/1"))
	g.Expect(builds[0].creds).To(Equal(bmc.Credentials{Username: "admin", Password: password}), "trimmed")
	g.Expect(builds[0].opts.DisableCertificateVerification).To(BeTrue())
	g.Expect(builds[0].driver.CallCount(bmc.OperationPowerState)).To(Equal(1), "the returned driver is the built one")
}

func TestForBMCVerifiesCertificatesUnlessTheBMCSaysOtherwise(t *testing.T) {
	g := NewWithT(t)
	w := newWorld(t, goodSecret())
	_, err := w.access.ForBMC(context.Background(), newBMC("bmc-1", "worker-1", addr1, "creds"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(w.factory.all()[0].opts.DisableCertificateVerification).To(BeFalse())
}

func TestForBMCCachesOneDriverPerBMC(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	w := newWorld(t, goodSecret())
	b1 := newBMC("bmc-1", "worker-1", addr1, "creds")
	b2 := newBMC("bmc-2", "worker-2", "redfish://10.0.0.2/redfish/v1/Systems/1", "creds")

	first, err := w.access.ForBMC(ctx, b1)
	g.Expect(err).NotTo(HaveOccurred())
	for range 3 {
		again, err := w.access.ForBMC(ctx, b1.DeepCopy())
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(again).To(BeIdenticalTo(first))
	}
	other, err := w.access.ForBMC(ctx, b2)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(other).NotTo(BeIdenticalTo(first))
	g.Expect(w.factory.all()).To(HaveLen(2), "one build per BMC")
}

func TestForBMCRebuildsAndClosesOnChange(t *testing.T) {
	tests := map[string]struct {
		change    func(ctx context.Context, g Gomega, c client.Client, b *v1alpha1.BMC)
		wantCreds bmc.Credentials
	}{
		"credentials rotated in the Secret": {
			change: func(ctx context.Context, g Gomega, c client.Client, _ *v1alpha1.BMC) {
				s := &corev1.Secret{}
				g.Expect(c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "creds"}, s)).To(Succeed())
				s.Data["password"] = []byte("rotated-" + password)
				g.Expect(c.Update(ctx, s)).To(Succeed())
			},
			wantCreds: bmc.Credentials{Username: "admin", Password: "rotated-" + password},
		},
		"BMC spec edited (new generation)": {
			change: func(_ context.Context, _ Gomega, _ client.Client, b *v1alpha1.BMC) {
				b.Generation++
				b.Spec.Address = "redfish://10.0.0.9/redfish/v1/Systems/1"
			},
			wantCreds: bmc.Credentials{Username: "admin", Password: password},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()
			w := newWorld(t, goodSecret())
			b := newBMC("bmc-1", "worker-1", addr1, "creds")
			old, err := w.access.ForBMC(ctx, b)
			g.Expect(err).NotTo(HaveOccurred())

			tc.change(ctx, g, w.client, b)
			fresh, err := w.access.ForBMC(ctx, b)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(fresh).NotTo(BeIdenticalTo(old))

			builds := w.factory.all()
			g.Expect(builds).To(HaveLen(2))
			g.Expect(builds[0].driver.CallCount(bmc.OperationClose)).To(Equal(1), "the replaced driver is closed")
			g.Expect(builds[1].driver.CallCount(bmc.OperationClose)).To(Equal(0))
			g.Expect(builds[1].creds).To(Equal(tc.wantCreds))

			again, err := w.access.ForBMC(ctx, b)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(again).To(BeIdenticalTo(fresh), "the new driver is cached in turn")
		})
	}
}

func TestForBMCKeepsANewerDriverForAStaleBMC(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	w := newWorld(t, goodSecret())
	b := newBMC("bmc-1", "worker-1", addr1, "creds")
	b.Generation = 3
	newer, err := w.access.ForBMC(ctx, b)
	g.Expect(err).NotTo(HaveOccurred())

	stale := b.DeepCopy()
	stale.Generation = 2 // another controller's cache has not caught up yet
	got, err := w.access.ForBMC(ctx, stale)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(BeIdenticalTo(newer))
	g.Expect(w.factory.all()).To(HaveLen(1))
}

func TestForBMCErrors(t *testing.T) {
	tests := map[string]struct {
		bmc        *v1alpha1.BMC
		secret     *corev1.Secret
		wantKind   error
		wantReason string
		wantIn     string
	}{
		"Secret missing": {
			bmc: newBMC("bmc-1", "w", addr1, "absent"), secret: goodSecret(),
			wantKind: ErrSecretNotFound, wantReason: v1alpha1.ReasonSecretNotFound,
			wantIn: `secret "absent" does not exist in namespace "metalheal-system"`,
		},
		"BMC outside the manager's namespace": {
			bmc: func() *v1alpha1.BMC {
				b := newBMC("bmc-1", "w", addr1, "creds")
				b.Namespace = "elsewhere"
				return b
			}(),
			secret:   goodSecret(),
			wantKind: ErrSecretNotFound, wantReason: v1alpha1.ReasonSecretNotFound,
			wantIn: `outside namespace "metalheal-system"`,
		},
		"password key missing": {
			bmc: newBMC("bmc-1", "w", addr1, "creds"), secret: newSecret("creds", map[string]string{"username": "admin"}),
			wantKind: ErrInvalidCredentials, wantReason: v1alpha1.ReasonInvalidCredentials,
			wantIn: "missing non-empty keys: password",
		},
		"blank username": {
			bmc:      newBMC("bmc-1", "w", addr1, "creds"),
			secret:   newSecret("creds", map[string]string{"username": " \n", "password": password}),
			wantKind: ErrInvalidCredentials, wantReason: v1alpha1.ReasonInvalidCredentials,
			wantIn: "missing non-empty keys: username",
		},
		"unparsable address": {
			bmc: newBMC("bmc-1", "w", "redfish://10.0.0.256/redfish/v1/Systems/1", "creds"), secret: goodSecret(),
			wantKind: ErrInvalidAddress, wantReason: v1alpha1.ReasonInvalidAddress,
			wantIn: "not a valid IPv4 address",
		},
		"unknown scheme": {
			bmc: newBMC("bmc-1", "w", "amt://10.0.0.1", "creds"), secret: goodSecret(),
			wantKind: ErrInvalidAddress, wantReason: v1alpha1.ReasonInvalidAddress,
			wantIn: `unknown BMC address scheme "amt"`,
		},
		"no driver registered for the scheme": {
			bmc: newBMC("bmc-1", "w", "ipmi://10.0.0.1", "creds"), secret: goodSecret(),
			wantKind: bmc.ErrUnsupported, wantReason: v1alpha1.ReasonUnsupported,
			wantIn: "no ipmi driver is registered",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			w := newWorld(t, tc.secret)
			d, err := w.access.ForBMC(context.Background(), tc.bmc)
			g.Expect(d).To(BeNil())
			g.Expect(err).To(MatchError(tc.wantKind))
			var accessErr *Error
			g.Expect(errors.As(err, &accessErr)).To(BeTrue(), "an *Error")
			g.Expect(accessErr.BMC.Name).To(Equal("bmc-1"))
			g.Expect(Reason(err)).To(Equal(tc.wantReason))
			g.Expect(err.Error()).To(ContainSubstring(tc.wantIn))
			g.Expect(err.Error()).To(ContainSubstring("BMC " + tc.bmc.Namespace + "/bmc-1"))
			g.Expect(err.Error()).NotTo(ContainSubstring(password))
		})
	}
}

func TestForBMCClosesTheDriverWhenItsSecretGoes(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	w := newWorld(t, goodSecret())
	b := newBMC("bmc-1", "worker-1", addr1, "creds")
	_, err := w.access.ForBMC(ctx, b)
	g.Expect(err).NotTo(HaveOccurred())

	g.Expect(w.client.Delete(ctx, goodSecret())).To(Succeed())
	_, err = w.access.ForBMC(ctx, b)
	g.Expect(err).To(MatchError(ErrSecretNotFound))
	g.Expect(w.factory.all()[0].driver.CallCount(bmc.OperationClose)).To(Equal(1))
}

func TestForHost(t *testing.T) {
	inCluster := func(b *v1alpha1.BMC, namespace, name string) *v1alpha1.BMC {
		b.Spec.Cluster = &v1alpha1.ClusterReference{Namespace: namespace, Name: name}
		return b
	}
	here := Host{Node: "worker-1"}
	edgeA := Host{Cluster: types.NamespacedName{Namespace: "fleet", Name: "edge-a"}, Node: "worker-1"}
	tests := map[string]struct {
		bmcs    []*v1alpha1.BMC
		host    Host
		wantBMC string
		// wantKind and wantErrIn, when set, are the failure's kind and part of its message.
		wantKind  error
		wantErrIn string
	}{
		"exactly one BMC names the node": {
			bmcs:    []*v1alpha1.BMC{newBMC("bmc-1", "worker-1", addr1, "creds"), newBMC("bmc-2", "worker-2", addr1, "creds")},
			host:    here,
			wantBMC: "bmc-1",
		},
		"no BMC names the node": {
			bmcs:      []*v1alpha1.BMC{newBMC("bmc-2", "worker-2", addr1, "creds")},
			host:      here,
			wantKind:  ErrBMCNotFound,
			wantErrIn: `host "worker-1": no BMC for the host: no BMC in namespace "metalheal-system" has spec.nodeName "worker-1" in this cluster`,
		},
		"two BMCs name the node: neither is used": {
			bmcs:      []*v1alpha1.BMC{newBMC("bmc-b", "worker-1", addr1, "creds"), newBMC("bmc-a", "worker-1", addr1, "creds")},
			host:      here,
			wantKind:  ErrBMCAmbiguous,
			wantErrIn: `2 BMCs in namespace "metalheal-system" power this host ([bmc-a bmc-b]); exactly one must`,
		},
		"a BMC in another namespace does not count": {
			bmcs: func() []*v1alpha1.BMC {
				b := newBMC("bmc-1", "worker-1", addr1, "creds")
				b.Namespace = "elsewhere"
				return []*v1alpha1.BMC{b}
			}(),
			host:      here,
			wantKind:  ErrBMCNotFound,
			wantErrIn: "no BMC in namespace",
		},
		"three clusters' worker-1 are three hosts: this cluster's": {
			bmcs: []*v1alpha1.BMC{inCluster(newBMC("edge-a-1", "worker-1", addr1, "creds"), "fleet", "edge-a"),
				newBMC("mgmt-1", "worker-1", addr1, "creds"), inCluster(newBMC("edge-b-1", "worker-1", addr1, "creds"), "fleet", "edge-b")},
			host:    here,
			wantBMC: "mgmt-1",
		},
		"three clusters' worker-1 are three hosts: a workload cluster's": {
			bmcs: []*v1alpha1.BMC{inCluster(newBMC("edge-a-1", "worker-1", addr1, "creds"), "fleet", "edge-a"),
				newBMC("mgmt-1", "worker-1", addr1, "creds"), inCluster(newBMC("edge-b-1", "worker-1", addr1, "creds"), "fleet", "edge-b")},
			host:    edgeA,
			wantBMC: "edge-a-1",
		},
		"a cluster of the same name in another namespace is another cluster": {
			bmcs:      []*v1alpha1.BMC{inCluster(newBMC("edge-a-1", "worker-1", addr1, "creds"), "lab", "edge-a")},
			host:      edgeA,
			wantKind:  ErrBMCNotFound,
			wantErrIn: `host "fleet/edge-a/worker-1": no BMC for the host: no BMC in namespace "metalheal-system" powers node "worker-1" of cluster fleet/edge-a; BMCs of Nodes of that name in other clusters: edge-a-1 (cluster lab/edge-a)`,
		},
		"only another cluster's BMC names the node: never guessed": {
			bmcs:      []*v1alpha1.BMC{inCluster(newBMC("edge-a-1", "worker-1", addr1, "creds"), "fleet", "edge-a")},
			host:      here,
			wantKind:  ErrBMCNotFound,
			wantErrIn: `no BMC in namespace "metalheal-system" powers node "worker-1" of this cluster; BMCs of Nodes of that name in other clusters: edge-a-1 (cluster fleet/edge-a) (spec.cluster tells them apart)`,
		},
		"only this cluster's BMC names the node: never used for a workload cluster's": {
			bmcs:      []*v1alpha1.BMC{newBMC("mgmt-1", "worker-1", addr1, "creds")},
			host:      edgeA,
			wantKind:  ErrBMCNotFound,
			wantErrIn: `BMCs of Nodes of that name in other clusters: mgmt-1 (this cluster)`,
		},
		"two BMCs of one workload cluster's host: neither is used": {
			bmcs: []*v1alpha1.BMC{inCluster(newBMC("edge-a-1", "worker-1", addr1, "creds"), "fleet", "edge-a"),
				inCluster(newBMC("edge-a-1b", "worker-1", addr1, "creds"), "fleet", "edge-a"), newBMC("mgmt-1", "worker-1", addr1, "creds")},
			host:      edgeA,
			wantKind:  ErrBMCAmbiguous,
			wantErrIn: `power this host ([edge-a-1 edge-a-1b])`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			objs := []client.Object{goodSecret()}
			for _, b := range tc.bmcs {
				objs = append(objs, b)
			}
			w := newWorld(t, objs...)
			b, d, err := w.access.ForHost(context.Background(), tc.host)
			if tc.wantKind != nil {
				g.Expect(err).To(MatchError(tc.wantKind))
				g.Expect(Reason(err)).To(Equal(map[error]string{ErrBMCNotFound: v1alpha1.ReasonBMCNotFound, ErrBMCAmbiguous: v1alpha1.ReasonBMCAmbiguous}[tc.wantKind]))
				g.Expect(err.Error()).To(ContainSubstring(tc.wantErrIn))
				g.Expect(b).To(BeNil())
				g.Expect(d).To(BeNil())
				g.Expect(w.factory.all()).To(BeEmpty(), "no driver was built")
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(b.Name).To(Equal(tc.wantBMC))
			g.Expect(d).NotTo(BeNil())
			g.Expect(w.factory.all()).To(HaveLen(1))
		})
	}
}

func TestForHostReturnsTheBMCWithItsDriverError(t *testing.T) {
	g := NewWithT(t)
	w := newWorld(t, newBMC("bmc-1", "worker-1", addr1, "absent"))
	b, d, err := w.access.ForHost(context.Background(), Host{Node: "worker-1"})
	g.Expect(err).To(MatchError(ErrSecretNotFound))
	g.Expect(b).NotTo(BeNil(), "the caller can still report on the BMC it found")
	g.Expect(b.Name).To(Equal("bmc-1"))
	g.Expect(d).To(BeNil())
}

func TestDriverErrorsNeverCarryTheCredentials(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	w := newWorld(t, goodSecret())
	d, err := w.access.ForBMC(ctx, newBMC("bmc-1", "worker-1", addr1, "creds"))
	g.Expect(err).NotTo(HaveOccurred())

	// A BMC (or a library) that echoes what it was sent, in the forms it could.
	fd := w.factory.all()[0].driver
	echo := &bmc.Error{Driver: "redfish", Operation: "PowerState", Kind: bmc.ErrAuthentication,
		Err: fmt.Errorf("login refused for %s (sent %q, header %s)", password, password, secretForms(bmc.Credentials{Username: "admin", Password: password})[0])}
	fd.FailNext(bmc.OperationPowerState, echo)

	_, err = d.PowerState(ctx)
	g.Expect(err).To(MatchError(bmc.ErrAuthentication), "the kind survives redaction")
	g.Expect(Reason(err)).To(Equal(v1alpha1.ReasonAuthenticationFailed))
	g.Expect(err.Error()).To(ContainSubstring("login refused for <redacted>"))
	g.Expect(err.Error()).NotTo(ContainSubstring(password))
	g.Expect(err.Error()).NotTo(ContainSubstring(`Hunter2-\"sw0rdf1sh`), "nor JSON-escaped")
	g.Expect(err.Error()).NotTo(ContainSubstring(secretForms(bmc.Credentials{Username: "admin", Password: password})[0]), "nor as basic auth")

	// The diagnostic interrupt reaches the driver through the same redaction.
	fd.FailNext(bmc.OperationDiagnose, &bmc.Error{Driver: "redfish", Operation: bmc.OperationDiagnose, Kind: bmc.ErrUnsupported,
		Err: fmt.Errorf("no NMI for %s", password)})
	err = bmc.Diagnose(ctx, d)
	g.Expect(err).To(MatchError(bmc.ErrUnsupported))
	g.Expect(err.Error()).To(ContainSubstring("no NMI for <redacted>"))
	g.Expect(bmc.Diagnose(ctx, d)).To(Succeed())
	g.Expect(fd.CallCount(bmc.OperationDiagnose)).To(Equal(2))
}

func TestForgetAndCloseAll(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	w := newWorld(t, goodSecret())
	b1 := newBMC("bmc-1", "worker-1", addr1, "creds")
	b2 := newBMC("bmc-2", "worker-2", "redfish://10.0.0.2/redfish/v1/Systems/1", "creds")
	for _, b := range []*v1alpha1.BMC{b1, b2} {
		_, err := w.access.ForBMC(ctx, b)
		g.Expect(err).NotTo(HaveOccurred())
	}
	builds := w.factory.all()

	w.access.Forget(ctx, b1.UID)
	g.Expect(builds[0].driver.CallCount(bmc.OperationClose)).To(Equal(1))
	g.Expect(builds[1].driver.CallCount(bmc.OperationClose)).To(Equal(0))
	w.access.Forget(ctx, b1.UID) // nothing left to close
	g.Expect(builds[0].driver.CallCount(bmc.OperationClose)).To(Equal(1))

	_, err := w.access.ForBMC(ctx, b1)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(w.factory.all()).To(HaveLen(3), "a forgotten BMC gets a new driver")

	stop, cancel := context.WithCancel(ctx)
	cancel()
	g.Expect(w.access.Start(stop)).To(Succeed(), "the runnable closes everything when the manager stops")
	for _, bd := range w.factory.all()[1:] {
		g.Expect(bd.driver.CallCount(bmc.OperationClose)).To(Equal(1))
	}
}

// recordingIndexer counts IndexField calls.
type recordingIndexer struct{ fields []string }

func (r *recordingIndexer) IndexField(_ context.Context, _ client.Object, field string, _ client.IndexerFunc) error {
	r.fields = append(r.fields, field)
	return nil
}

func TestSetupIndexesRegistersOnce(t *testing.T) {
	g := NewWithT(t)
	w := newWorld(t)
	ix := &recordingIndexer{}
	g.Expect(w.access.SetupIndexes(context.Background(), ix)).To(Succeed())
	g.Expect(w.access.SetupIndexes(context.Background(), ix)).To(Succeed(), "a second controller may ask again")
	g.Expect(ix.fields).To(Equal([]string{IndexHost, IndexNodeName, IndexSecretName, IndexCABundle}))
}

func TestIndexesExtractTheFields(t *testing.T) {
	g := NewWithT(t)
	b := newBMC("bmc-1", "worker-1", addr1, "creds")
	got := map[string][]string{}
	for _, ix := range indexes {
		got[ix.field] = ix.extract(b)
	}
	g.Expect(got).To(Equal(map[string][]string{IndexHost: {"worker-1"}, IndexNodeName: {"worker-1"}, IndexSecretName: {"creds"}, IndexCABundle: nil}))
	b.Spec.CABundleRef = &v1alpha1.CABundleReference{Kind: v1alpha1.CABundleConfigMap, Name: "site-ca"}
	g.Expect(indexes[3].extract(b)).To(Equal([]string{"ConfigMap/site-ca"}))
	b.Spec.Cluster = &v1alpha1.ClusterReference{Namespace: "fleet", Name: "edge-a"}
	g.Expect(indexes[0].extract(b)).To(Equal([]string{"fleet/edge-a/worker-1"}))
	g.Expect(indexes[1].extract(b)).To(Equal([]string{"worker-1"}))
}

func TestReason(t *testing.T) {
	tests := map[string]struct {
		err  error
		want string
	}{
		"nil":                 {nil, ""},
		"BMC not found":       {&Error{Node: "n", Kind: ErrBMCNotFound}, v1alpha1.ReasonBMCNotFound},
		"BMC ambiguous":       {&Error{Node: "n", Kind: ErrBMCAmbiguous}, v1alpha1.ReasonBMCAmbiguous},
		"Secret not found":    {&Error{Kind: ErrSecretNotFound}, v1alpha1.ReasonSecretNotFound},
		"invalid credentials": {&Error{Kind: ErrInvalidCredentials}, v1alpha1.ReasonInvalidCredentials},
		"invalid address":     {&Error{Kind: ErrInvalidAddress}, v1alpha1.ReasonInvalidAddress},
		"no driver":           {&Error{Kind: bmc.ErrUnsupported}, v1alpha1.ReasonUnsupported},
		"authentication":      {&bmc.Error{Kind: bmc.ErrAuthentication}, v1alpha1.ReasonAuthenticationFailed},
		"timeout":             {&bmc.Error{Kind: bmc.ErrTimeout}, v1alpha1.ReasonBMCTimeout},
		"bare deadline":       {fmt.Errorf("waiting: %w", context.DeadlineExceeded), v1alpha1.ReasonBMCTimeout},
		"unsupported":         {&bmc.Error{Kind: bmc.ErrUnsupported}, v1alpha1.ReasonUnsupported},
		"unreachable":         {&bmc.Error{Kind: bmc.ErrUnreachable}, v1alpha1.ReasonBMCUnreachable},
		"CA bundle not found": {&Error{Kind: ErrCABundleNotFound}, v1alpha1.ReasonCABundleNotFound},
		"CA bundle invalid":   {&Error{Kind: ErrCABundleInvalid}, v1alpha1.ReasonCABundleInvalid},
		"certificate untrusted": {&bmc.Error{Kind: bmc.ErrUnreachable, Err: &bmc.CertificateError{Err: x509.UnknownAuthorityError{}}},
			v1alpha1.ReasonCertificateVerificationFailed},
		"an API error": {errors.New("etcdserver: leader changed"), ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			NewWithT(t).Expect(Reason(tc.err)).To(Equal(tc.want))
		})
	}
}

func TestErrorMessages(t *testing.T) {
	tests := map[string]struct {
		err  *Error
		want string
	}{
		"about a BMC, with a cause": {
			&Error{BMC: types.NamespacedName{Namespace: ns, Name: "b"}, Kind: ErrSecretNotFound, Err: errors.New("gone")},
			"BMC metalheal-system/b: credentials secret not found: gone",
		},
		"about a host, without a cause": {
			&Error{Node: "worker-1", Kind: ErrBMCNotFound},
			`host "worker-1": no BMC for the host`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(tc.err.Error()).To(Equal(tc.want))
			g.Expect(strings.Count(tc.err.Error(), "\n")).To(BeZero())
		})
	}
}

// A BMC check reads the Secret once (Read) and builds the driver from that reading (ForBMCWithInputs):
// the same driver as ForBMC, a missing Secret reported the same way.
func TestReadThenForBMCWithInputs(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	w := newWorld(t, goodSecret())
	b := newBMC("bmc-1", "worker-1", addr1, "creds")

	in, err := w.access.Read(ctx, b)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(in.Secret).NotTo(BeNil())
	g.Expect(in.Secret.ResourceVersion).NotTo(BeEmpty())
	d, err := w.access.ForBMCWithInputs(ctx, b, in)
	g.Expect(err).NotTo(HaveOccurred())
	again, err := w.access.ForBMC(ctx, b)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again).To(BeIdenticalTo(d), "one driver, whichever way it was asked for")
	g.Expect(w.factory.all()).To(HaveLen(1))

	missing := newBMC("bmc-2", "worker-2", addr1, "no-such-secret")
	in, err = w.access.Read(ctx, missing)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(in.Secret).To(BeNil())
	_, err = w.access.ForBMCWithInputs(ctx, missing, in)
	g.Expect(err).To(MatchError(ErrSecretNotFound))

	elsewhere := newBMC("bmc-3", "worker-3", addr1, "creds")
	elsewhere.Namespace = "other"
	secret, err := w.access.Secret(ctx, elsewhere)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(secret).To(BeNil(), "Secrets are read in the Access's namespace only")
}
