package bmcinventory

import (
	"context"
	"encoding/json"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/bmcaccess"
	"github.com/metalheal/metalheal/internal/testenv"
	"github.com/metalheal/metalheal/pkg/bmc"
	"github.com/metalheal/metalheal/pkg/bmc/redfish"
	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
)

// Distinctive passwords, so that a leak anywhere cannot hide.
const (
	bmcUser       = "admin"
	goodPassword  = `Corr3ct-"H0rse/B@ttery`
	wrongPassword = `Tr0ub4dor&3-"Wr0ng`
)

const bmcCheckInterval = 5 * time.Minute

// bmcWait bounds the waits on a running manager: generous, for a shared, loaded machine.
const bmcWait = 20 * time.Second

// testRedfishFactory adapts redfish.New to the registry, as main does.
func testRedfishFactory(addr bmc.Address, creds bmc.Credentials, opts bmc.Options) (bmc.Driver, error) {
	return redfish.New(addr.Endpoint(), addr.Path, creds, opts)
}

func newTestRegistry() *bmc.Registry {
	reg := bmc.NewRegistry()
	Expect(reg.Register(bmc.DriverRedfish, testRedfishFactory)).To(Succeed())
	return reg
}

// startBMCMock starts a one-system Redfish mock whose account is bmcUser/goodPassword.
func startBMCMock(m *redfishmock.Mock) *redfishmock.Mock {
	started, err := m.WithSystems(1).WithCredentials(bmcUser, goodPassword).Start()
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(started.Close)
	return started
}

// bmcMockAddress is the BMC address of the mock's system id.
func bmcMockAddress(m *redfishmock.Mock, id string) string {
	u, err := url.Parse(m.URL())
	Expect(err).NotTo(HaveOccurred())
	return "redfish+" + u.Scheme + "://" + u.Host + m.SystemPath(id)
}

// closedBMCAddress is a Redfish address where nothing listens.
func closedBMCAddress() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	addr := ln.Addr().String()
	Expect(ln.Close()).To(Succeed())
	return "redfish+http://" + addr + "/redfish/v1/Systems/1"
}

func createBMCSecret(ctx context.Context, ns, name string, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, StringData: data}
	Expect(k8sClient.Create(ctx, s)).To(Succeed())
	return s
}

func bmcCredentials(password string) map[string]string {
	return map[string]string{"username": bmcUser, "password": password}
}

func rotateBMCPassword(ctx context.Context, ns, name, password string) {
	s := &corev1.Secret{}
	Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, s)).To(Succeed())
	s.Data["password"] = []byte(password)
	Expect(k8sClient.Update(ctx, s)).To(Succeed())
}

func createBMC(ctx context.Context, ns, name, address, secret string, insecure bool) *v1alpha1.BMC {
	b := &v1alpha1.BMC{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.BMCSpec{NodeName: "node-" + name, Address: address,
			CredentialsSecretRef: v1alpha1.SecretReference{Name: secret}, DisableCertificateVerification: insecure},
	}
	Expect(k8sClient.Create(ctx, b)).To(Succeed())
	return b
}

func getBMC(ctx context.Context, ns, name string) *v1alpha1.BMC {
	b := &v1alpha1.BMC{}
	Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, b)).To(Succeed())
	return b
}

// bmcConditionState is "Status/Reason" of a condition, "" when it is absent.
func bmcConditionState(b *v1alpha1.BMC, t string) string {
	c := meta.FindStatusCondition(b.Status.Conditions, t)
	if c == nil {
		return ""
	}
	return string(c.Status) + "/" + c.Reason
}

func bmcConditionMessage(b *v1alpha1.BMC, t string) string {
	if c := meta.FindStatusCondition(b.Status.Conditions, t); c != nil {
		return c.Message
	}
	return ""
}

// countMockRequests counts the mock's recorded requests with this method and path.
func countMockRequests(m *redfishmock.Mock, method, path string) int {
	n := 0
	for _, r := range m.Requests() {
		if r.Method == method && r.Path == path {
			n++
		}
	}
	return n
}

const mockSessionsPath = "/redfish/v1/SessionService/Sessions"

// bmcStepper drives a Reconciler by hand: one Reconcile call at a time, on a fake clock, with events
// recorded in memory.
type bmcStepper struct {
	ns       string
	clock    *clocktesting.FakeClock
	recorder *events.FakeRecorder
	access   *bmcaccess.Access
	r        *Reconciler
}

var bmcT0Suite = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newBMCStepper(ns string) *bmcStepper {
	s := &bmcStepper{ns: ns, clock: clocktesting.NewFakeClock(bmcT0Suite), recorder: events.NewFakeRecorder(100)}
	s.restart()
	return s
}

// restart replaces the reconciler and its Access with new ones, as a manager restart does: all that is
// left is what the API server holds. The clock goes on.
func (s *bmcStepper) restart() {
	access := bmcaccess.New(k8sClient, s.ns, newTestRegistry(), bmcaccess.Options{})
	s.access = access
	s.r = &Reconciler{Client: k8sClient, Access: access, Recorder: s.recorder, Clock: s.clock,
		Options: Options{Interval: bmcCheckInterval, CheckTimeout: 5 * time.Second}}
	DeferCleanup(func(ctx SpecContext) { access.CloseAll(ctx) })
}

func (s *bmcStepper) reconcile(ctx context.Context, name string) ctrl.Result {
	res, err := s.r.Reconcile(ctrl.LoggerInto(ctx, GinkgoLogr), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: s.ns, Name: name}})
	Expect(err).NotTo(HaveOccurred())
	return res
}

// events drains the events recorded so far.
func (s *bmcStepper) events() []string {
	var out []string
	for {
		select {
		case e := <-s.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// nodesRemediating is a NodeRemediations whose answers the test sets.
type nodesRemediating struct {
	mu    sync.Mutex
	nodes map[string]bool
}

func (n *nodesRemediating) set(node string, busy bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.nodes == nil {
		n.nodes = map[string]bool{}
	}
	n.nodes[node] = busy
}

func (n *nodesRemediating) Remediating(_ context.Context, node string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.nodes[node]
}

var _ = Describe("BMC inventory, one reconcile at a time", func() {
	var (
		ns string
		s  *bmcStepper
	)
	BeforeEach(func(ctx SpecContext) {
		ns = newNamespace(ctx)
		s = newBMCStepper(ns)
	})

	It("marks a BMC with good credentials Reachable, with its power state, and checks it again in its slot", func(ctx SpecContext) {
		m := startBMCMock(redfishmock.New())
		createBMCSecret(ctx, ns, "creds", bmcCredentials(goodPassword))
		createBMC(ctx, ns, "bmc-1", bmcMockAddress(m, "1"), "creds", false)
		systemPath := m.SystemPath("1")

		res := s.reconcile(ctx, "bmc-1")
		b := getBMC(ctx, ns, "bmc-1")
		slot := bmcSlotAfter(bmcPhase(b.UID, bmcCheckInterval), bmcT0Suite, bmcCheckInterval)
		Expect(res.RequeueAfter).To(Equal(slot.Sub(bmcT0Suite)), "the next check is in the BMC's slot")
		Expect(res.RequeueAfter).To(And(BeNumerically(">=", bmcCheckInterval/2), BeNumerically("<", bmcCheckInterval*3/2)))
		Expect(bmcConditionState(b, v1alpha1.ConditionReachable)).To(Equal("True/CheckSucceeded"))
		Expect(bmcConditionState(b, v1alpha1.ConditionCredentialsValid)).To(Equal("True/CheckSucceeded"))
		Expect(bmcConditionMessage(b, v1alpha1.ConditionCredentialsValid)).To(Equal(`The BMC accepted the credentials in Secret "creds"`))
		Expect(b.Status.PowerState).To(Equal(v1alpha1.PowerOn))
		Expect(b.Status.LastChecked.Time).To(BeTemporally("==", bmcT0Suite))
		Expect(b.Status.ObservedGeneration).To(Equal(b.Generation))
		Expect(s.events()).To(BeEmpty(), "a healthy BMC is no news")
		Expect(countMockRequests(m, "GET", systemPath)).To(Equal(1), "one PowerState read")

		By("not checking again before its slot")
		Expect(s.reconcile(ctx, "bmc-1").RequeueAfter).To(Equal(slot.Sub(bmcT0Suite)))
		s.clock.SetTime(slot.Add(-time.Second))
		Expect(s.reconcile(ctx, "bmc-1").RequeueAfter).To(Equal(time.Second))
		Expect(countMockRequests(m, "GET", systemPath)).To(Equal(1))

		By("checking again in its slot, seeing the host's new power state, and planning the next check one interval later")
		Expect(m.SetPowerState("1", redfishmock.PowerOff)).To(Succeed())
		s.clock.SetTime(slot)
		Expect(s.reconcile(ctx, "bmc-1").RequeueAfter).To(Equal(bmcCheckInterval))
		Expect(countMockRequests(m, "GET", systemPath)).To(Equal(2))
		b = getBMC(ctx, ns, "bmc-1")
		Expect(b.Status.PowerState).To(Equal(v1alpha1.PowerOff))
		Expect(b.Status.LastChecked.Time).To(BeTemporally("==", slot.Truncate(time.Second)), "lastChecked has a precision of a second")
		Expect(meta.FindStatusCondition(b.Status.Conditions, v1alpha1.ConditionReachable).LastTransitionTime.Time).
			To(BeTemporally("==", bmcT0Suite), "the condition did not change")
		Expect(countMockRequests(m, "POST", mockSessionsPath)).To(Equal(1), "one driver per BMC: its session is reused")
	})

	It("reports a wrong password, and recovers as soon as the Secret is rotated", func(ctx SpecContext) {
		m := startBMCMock(redfishmock.New())
		createBMCSecret(ctx, ns, "creds", bmcCredentials(wrongPassword))
		createBMC(ctx, ns, "bmc-1", bmcMockAddress(m, "1"), "creds", false)

		s.reconcile(ctx, "bmc-1")
		b := getBMC(ctx, ns, "bmc-1")
		Expect(bmcConditionState(b, v1alpha1.ConditionReachable)).To(Equal("True/CheckSucceeded"))
		Expect(bmcConditionState(b, v1alpha1.ConditionCredentialsValid)).To(Equal("False/AuthenticationFailed"))
		Expect(bmcConditionMessage(b, v1alpha1.ConditionCredentialsValid)).To(
			ContainSubstring(`The BMC refused the username or password in Secret "creds": fix them there`))
		Expect(b.Status.PowerState).To(Equal(v1alpha1.PowerUnknown))
		Expect(s.events()).To(ConsistOf(HavePrefix("Warning BMCCredentialsInvalid AuthenticationFailed: The BMC refused")))

		By("saying nothing more while nothing changes")
		s.clock.Step(bmcCheckInterval)
		s.reconcile(ctx, "bmc-1")
		Expect(bmcConditionState(getBMC(ctx, ns, "bmc-1"), v1alpha1.ConditionCredentialsValid)).To(Equal("False/AuthenticationFailed"))
		Expect(s.events()).To(BeEmpty())

		By("checking at once when the Secret changes, without waiting for the interval")
		rotateBMCPassword(ctx, ns, "creds", goodPassword)
		s.reconcile(ctx, "bmc-1")
		b = getBMC(ctx, ns, "bmc-1")
		Expect(bmcConditionState(b, v1alpha1.ConditionCredentialsValid)).To(Equal("True/CheckSucceeded"))
		Expect(b.Status.PowerState).To(Equal(v1alpha1.PowerOn))
		Expect(s.events()).To(ConsistOf("Normal BMCRecovered The BMC answers and accepts its credentials again (was AuthenticationFailed); the host is On"))
	})

	DescribeTable("reports what is wrong with a BMC, and how to fix it",
		func(ctx SpecContext, setup func(ctx context.Context) (address, secret string, insecure bool),
			wantReachable, wantCredentials, wantMessage, wantEvent string) {
			address, secret, insecure := setup(ctx)
			createBMC(ctx, ns, "bmc-1", address, secret, insecure)
			res := s.reconcile(ctx, "bmc-1")
			b := getBMC(ctx, ns, "bmc-1")
			Expect(res.RequeueAfter).To(Equal(bmcSlotAfter(bmcPhase(b.UID, bmcCheckInterval), bmcT0Suite, bmcCheckInterval).Sub(bmcT0Suite)),
				"a BMC with a problem is checked in its slot too (and at once when its spec or Secret changes)")
			Expect(bmcConditionState(b, v1alpha1.ConditionReachable)).To(Equal(wantReachable))
			Expect(bmcConditionState(b, v1alpha1.ConditionCredentialsValid)).To(Equal(wantCredentials))
			Expect(bmcConditionMessage(b, v1alpha1.ConditionReachable) + " | " + bmcConditionMessage(b, v1alpha1.ConditionCredentialsValid)).
				To(ContainSubstring(wantMessage))
			if wantEvent == "" {
				Expect(s.events()).To(BeEmpty())
			} else {
				Expect(s.events()).To(ConsistOf(HavePrefix(wantEvent)))
			}
		},
		Entry("the Secret is missing",
			func(ctx context.Context) (string, string, bool) {
				return bmcMockAddress(startBMCMock(redfishmock.New()), "1"), "absent", false
			},
			"Unknown/SecretNotFound", "False/SecretNotFound",
			`Create Secret "absent" in namespace`, "Warning BMCCredentialsInvalid SecretNotFound"),
		Entry("the Secret has no password",
			func(ctx context.Context) (string, string, bool) {
				createBMCSecret(ctx, ns, "creds", map[string]string{"username": bmcUser, "pasword": goodPassword})
				return bmcMockAddress(startBMCMock(redfishmock.New()), "1"), "creds", false
			},
			"Unknown/InvalidCredentials", "False/InvalidCredentials",
			"missing non-empty keys: password", "Warning BMCCredentialsInvalid InvalidCredentials"),
		Entry("the address is not valid",
			func(ctx context.Context) (string, string, bool) {
				createBMCSecret(ctx, ns, "creds", bmcCredentials(goodPassword))
				return "redfish://10.0.0.256/redfish/v1/Systems/1", "creds", false
			},
			"False/InvalidAddress", "Unknown/InvalidAddress",
			`Fix spec.address (invalid BMC address "redfish://10.0.0.256/redfish/v1/Systems/1": "10.0.0.256" is not a valid IPv4 address)`,
			"Warning BMCMisconfigured InvalidAddress"),
		Entry("the address names a system the BMC does not have",
			func(ctx context.Context) (string, string, bool) {
				createBMCSecret(ctx, ns, "creds", bmcCredentials(goodPassword))
				return bmcMockAddress(startBMCMock(redfishmock.New()), "99"), "creds", false
			},
			"False/Unsupported", "Unknown/Unsupported", "/redfish/v1/Systems/99", "Warning BMCMisconfigured Unsupported"),
		Entry("nothing listens at the address",
			func(ctx context.Context) (string, string, bool) {
				createBMCSecret(ctx, ns, "creds", bmcCredentials(goodPassword))
				return closedBMCAddress(), "creds", false
			},
			"False/Unreachable", "Unknown/Unreachable", "connection refused", "Warning BMCUnreachable Unreachable"),
		Entry("the BMC drops every connection",
			func(ctx context.Context) (string, string, bool) {
				createBMCSecret(ctx, ns, "creds", bmcCredentials(goodPassword))
				m := startBMCMock(redfishmock.New())
				Expect(m.SetGlobalFaults(redfishmock.Faults{Drop: true})).To(Succeed())
				return bmcMockAddress(m, "1"), "creds", false
			},
			"False/Unreachable", "Unknown/Unreachable", "The BMC did not answer", "Warning BMCUnreachable Unreachable"),
		Entry("the BMC's certificate is not trusted",
			func(ctx context.Context) (string, string, bool) {
				createBMCSecret(ctx, ns, "creds", bmcCredentials(goodPassword))
				return bmcMockAddress(startBMCMock(redfishmock.New().WithTLS()), "1"), "creds", false
			},
			"False/CertificateVerificationFailed", "Unknown/CertificateVerificationFailed",
			"TLS certificate verification failed: set spec.caBundleRef", "Warning BMCMisconfigured CertificateVerificationFailed"),
		Entry("the BMC's certificate is self-signed and the BMC disables verification",
			func(ctx context.Context) (string, string, bool) {
				createBMCSecret(ctx, ns, "creds", bmcCredentials(goodPassword))
				return bmcMockAddress(startBMCMock(redfishmock.New().WithTLS()), "1"), "creds", true
			},
			"True/CheckSucceeded", "True/CheckSucceeded", "the host is On", ""),
	)

	It("checks a BMC at once when its missing Secret appears", func(ctx SpecContext) {
		m := startBMCMock(redfishmock.New())
		createBMC(ctx, ns, "bmc-1", bmcMockAddress(m, "1"), "creds", false)
		s.reconcile(ctx, "bmc-1")
		Expect(bmcConditionState(getBMC(ctx, ns, "bmc-1"), v1alpha1.ConditionCredentialsValid)).To(Equal("False/SecretNotFound"))

		createBMCSecret(ctx, ns, "creds", bmcCredentials(goodPassword))
		s.reconcile(ctx, "bmc-1")
		b := getBMC(ctx, ns, "bmc-1")
		Expect(bmcConditionState(b, v1alpha1.ConditionReachable)).To(Equal("True/CheckSucceeded"))
		Expect(bmcConditionState(b, v1alpha1.ConditionCredentialsValid)).To(Equal("True/CheckSucceeded"))
	})

	It("checks a BMC at once when its spec changes, with a new driver", func(ctx SpecContext) {
		m1 := startBMCMock(redfishmock.New())
		m2 := startBMCMock(redfishmock.New())
		Expect(m2.SetPowerState("1", redfishmock.PowerOff)).To(Succeed())
		createBMCSecret(ctx, ns, "creds", bmcCredentials(goodPassword))
		createBMC(ctx, ns, "bmc-1", bmcMockAddress(m1, "1"), "creds", false)
		s.reconcile(ctx, "bmc-1")
		Expect(m1.SessionCount()).To(Equal(1))

		b := getBMC(ctx, ns, "bmc-1")
		b.Spec.Address = bmcMockAddress(m2, "1")
		Expect(k8sClient.Update(ctx, b)).To(Succeed())
		s.reconcile(ctx, "bmc-1")
		b = getBMC(ctx, ns, "bmc-1")
		Expect(b.Status.PowerState).To(Equal(v1alpha1.PowerOff), "read from the new address")
		Expect(b.Status.ObservedGeneration).To(Equal(b.Generation))
		Expect(m1.SessionCount()).To(BeZero(), "the old driver logged out")
	})

	It("logs out of a deleted BMC", func(ctx SpecContext) {
		m := startBMCMock(redfishmock.New())
		createBMCSecret(ctx, ns, "creds", bmcCredentials(goodPassword))
		b := createBMC(ctx, ns, "bmc-1", bmcMockAddress(m, "1"), "creds", false)
		s.reconcile(ctx, "bmc-1")
		Expect(m.SessionCount()).To(Equal(1))

		Expect(k8sClient.Delete(ctx, b)).To(Succeed())
		Expect(s.reconcile(ctx, "bmc-1")).To(Equal(ctrl.Result{}))
		Expect(m.SessionCount()).To(BeZero())
		Expect(m.Requests()).To(ContainElement(And(
			HaveField("Method", "DELETE"), HaveField("Path", HavePrefix(mockSessionsPath+"/")))))
	})
})

var _ = Describe("BMC inventory schedule and status writes", func() {
	var (
		ns         string
		s          *bmcStepper
		m          *redfishmock.Mock
		systemPath string
	)
	BeforeEach(func(ctx SpecContext) {
		ns = newNamespace(ctx)
		s = newBMCStepper(ns)
		m = startBMCMock(redfishmock.New())
		systemPath = m.SystemPath("1")
	})
	// checks is how many checks reached the mock: one PowerState read each.
	checks := func() int { return countMockRequests(m, "GET", systemPath) }

	It("checks a new BMC at once, and after a restart keeps a healthy BMC's slot instead of checking it again", func(ctx SpecContext) {
		createBMCSecret(ctx, ns, "creds", bmcCredentials(goodPassword))
		createBMC(ctx, ns, "bmc-1", bmcMockAddress(m, "1"), "creds", false)
		s.reconcile(ctx, "bmc-1")
		Expect(checks()).To(Equal(1), "checked at once")
		b := getBMC(ctx, ns, "bmc-1")
		Expect(bmcConditionState(b, v1alpha1.ConditionReachable)).To(Equal("True/CheckSucceeded"))
		phase := bmcPhase(b.UID, bmcCheckInterval)
		slot := bmcSlotAfter(phase, bmcT0Suite, bmcCheckInterval)

		By("restarting a minute later: no check, the next one in its slot")
		s.clock.Step(time.Minute)
		s.restart()
		Expect(s.reconcile(ctx, "bmc-1").RequeueAfter).To(Equal(slot.Sub(bmcT0Suite.Add(time.Minute))))
		Expect(checks()).To(Equal(1))
		Expect(countMockRequests(m, "POST", mockSessionsPath)).To(Equal(1), "not even a new session")

		By("checking it when the requeue comes, even a second late")
		s.clock.SetTime(slot.Add(time.Second))
		Expect(s.reconcile(ctx, "bmc-1").RequeueAfter).To(Equal(bmcCheckInterval-time.Second), "back in its slot")
		Expect(checks()).To(Equal(2))
	})

	It("after a restart, waits for the next slot of a healthy BMC whose lastChecked is old, rather than checking it at once", func(ctx SpecContext) {
		createBMCSecret(ctx, ns, "creds", bmcCredentials(goodPassword))
		createBMC(ctx, ns, "bmc-1", bmcMockAddress(m, "1"), "creds", false)
		s.reconcile(ctx, "bmc-1")
		phase := bmcPhase(getBMC(ctx, ns, "bmc-1").UID, bmcCheckInterval)

		// Half an interval before its slot, 40 minutes or so after lastChecked: the slot after lastChecked
		// is long past.
		now := bmcNextSlot(phase, bmcT0Suite.Add(40*time.Minute), bmcCheckInterval).Add(-bmcCheckInterval / 2)
		s.clock.SetTime(now)
		s.restart()
		Expect(s.reconcile(ctx, "bmc-1").RequeueAfter).To(Equal(bmcCheckInterval / 2))
		Expect(checks()).To(Equal(1))

		s.clock.Step(bmcCheckInterval / 2)
		Expect(s.reconcile(ctx, "bmc-1").RequeueAfter).To(Equal(bmcCheckInterval))
		Expect(checks()).To(Equal(2))
	})

	It("after a restart, checks at once a BMC whose last check found it unhealthy, without repeating its event", func(ctx SpecContext) {
		createBMCSecret(ctx, ns, "creds", bmcCredentials(wrongPassword))
		createBMC(ctx, ns, "bmc-1", bmcMockAddress(m, "1"), "creds", false)
		s.reconcile(ctx, "bmc-1")
		Expect(bmcConditionState(getBMC(ctx, ns, "bmc-1"), v1alpha1.ConditionCredentialsValid)).To(Equal("False/AuthenticationFailed"))
		Expect(s.events()).To(ConsistOf(HavePrefix("Warning BMCCredentialsInvalid")))
		logins := countMockRequests(m, "POST", mockSessionsPath)
		Expect(logins).To(BeNumerically(">", 0))

		s.clock.Step(time.Minute)
		s.restart()
		s.reconcile(ctx, "bmc-1")
		Expect(countMockRequests(m, "POST", mockSessionsPath)).To(BeNumerically(">", logins), "tried to log in again")
		Expect(bmcConditionState(getBMC(ctx, ns, "bmc-1"), v1alpha1.ConditionCredentialsValid)).To(Equal("False/AuthenticationFailed"))
		Expect(s.events()).To(BeEmpty(), "the status already says so")
	})

	It("after a restart, checks at once a BMC whose spec changed while the manager was down", func(ctx SpecContext) {
		createBMCSecret(ctx, ns, "creds", bmcCredentials(goodPassword))
		createBMC(ctx, ns, "bmc-1", bmcMockAddress(m, "1"), "creds", false)
		s.reconcile(ctx, "bmc-1")
		Expect(checks()).To(Equal(1))

		b := getBMC(ctx, ns, "bmc-1")
		b.Spec.NodeName = "node-renamed"
		Expect(k8sClient.Update(ctx, b)).To(Succeed())
		s.clock.Step(time.Minute)
		s.restart()
		s.reconcile(ctx, "bmc-1")
		Expect(checks()).To(Equal(2))
		b = getBMC(ctx, ns, "bmc-1")
		Expect(b.Status.ObservedGeneration).To(Equal(b.Generation))
		Expect(b.Status.LastChecked.Time).To(BeTemporally("==", bmcT0Suite.Add(time.Minute)))
	})

	It("leaves a healthy BMC whose host is being power-cycled to the remediator, but checks it at once when it changes", func(ctx SpecContext) {
		createBMCSecret(ctx, ns, "creds", bmcCredentials(goodPassword))
		createBMC(ctx, ns, "bmc-1", bmcMockAddress(m, "1"), "creds", false)
		remediating := &nodesRemediating{}
		s.r.Remediations = remediating
		s.reconcile(ctx, "bmc-1")
		Expect(checks()).To(Equal(1), "a new BMC is checked")
		slot := bmcSlotAfter(bmcPhase(getBMC(ctx, ns, "bmc-1").UID, bmcCheckInterval), bmcT0Suite, bmcCheckInterval)
		skipped := testutil.ToFloat64(Checks.WithLabelValues(bmcCheckSkippedRemediating))

		By("its slot comes while its node is being remediated: no check, the next slot planned")
		remediating.set("node-bmc-1", true)
		s.clock.SetTime(slot)
		Expect(s.reconcile(ctx, "bmc-1").RequeueAfter).To(Equal(bmcCheckInterval))
		Expect(checks()).To(Equal(1))
		Expect(testutil.ToFloat64(Checks.WithLabelValues(bmcCheckSkippedRemediating)) - skipped).To(Equal(1.0))

		By("a change to the BMC is checked at once, remediation or not")
		b := getBMC(ctx, ns, "bmc-1")
		b.Spec.DisableCertificateVerification = true
		Expect(k8sClient.Update(ctx, b)).To(Succeed())
		s.reconcile(ctx, "bmc-1")
		Expect(checks()).To(Equal(2))

		By("once the remediation is over, the next slot checks it again")
		remediating.set("node-bmc-1", false)
		s.clock.Step(bmcCheckInterval)
		s.reconcile(ctx, "bmc-1")
		Expect(checks()).To(Equal(3))
	})

	It("writes the status only when something an admin reads changed, or when lastChecked needs a refresh", func(ctx SpecContext) {
		succeeded := Checks.WithLabelValues(v1alpha1.ReasonCheckSucceeded)
		countedBefore := testutil.ToFloat64(succeeded)
		createBMCSecret(ctx, ns, "creds", bmcCredentials(goodPassword))
		createBMC(ctx, ns, "bmc-1", bmcMockAddress(m, "1"), "creds", false)
		res := s.reconcile(ctx, "bmc-1")
		written := getBMC(ctx, ns, "bmc-1")
		Expect(written.Status.LastChecked.Time).To(BeTemporally("==", bmcT0Suite))

		By("checking in every slot for half an hour without writing anything")
		for {
			s.clock.Step(res.RequeueAfter)
			if s.clock.Since(bmcT0Suite) >= StatusRefreshAge {
				break
			}
			res = s.reconcile(ctx, "bmc-1")
			Expect(getBMC(ctx, ns, "bmc-1").ResourceVersion).To(Equal(written.ResourceVersion), "checked at %s, nothing new", s.clock.Now())
		}
		quiet := checks()
		Expect(quiet).To(BeNumerically(">=", 6), "checked every interval")
		Expect(testutil.ToFloat64(succeeded)-countedBefore).To(BeEquivalentTo(quiet), "every check counted")

		By("writing lastChecked once it is as old as the refresh age")
		refreshedAt := s.clock.Now()
		res = s.reconcile(ctx, "bmc-1")
		Expect(checks()).To(Equal(quiet + 1))
		refreshed := getBMC(ctx, ns, "bmc-1")
		Expect(refreshed.ResourceVersion).NotTo(Equal(written.ResourceVersion))
		Expect(refreshed.Status.LastChecked.Time).To(BeTemporally("==", refreshedAt.Truncate(time.Second)))
		Expect(refreshed.Status.Conditions).To(Equal(written.Status.Conditions), "conditions, and their lastTransitionTime, untouched")

		By("writing at once a change of the power state")
		Expect(m.SetPowerState("1", redfishmock.PowerOff)).To(Succeed())
		s.clock.Step(res.RequeueAfter)
		changedAt := s.clock.Now()
		res = s.reconcile(ctx, "bmc-1")
		changed := getBMC(ctx, ns, "bmc-1")
		Expect(changed.ResourceVersion).NotTo(Equal(refreshed.ResourceVersion))
		Expect(changed.Status.PowerState).To(Equal(v1alpha1.PowerOff))
		Expect(changed.Status.LastChecked.Time).To(BeTemporally("==", changedAt.Truncate(time.Second)))
		Expect(meta.FindStatusCondition(changed.Status.Conditions, v1alpha1.ConditionReachable).LastTransitionTime.Time).
			To(BeTemporally("==", bmcT0Suite), "still Reachable")

		By("and then nothing again")
		s.clock.Step(res.RequeueAfter)
		s.reconcile(ctx, "bmc-1")
		Expect(checks()).To(Equal(quiet + 3))
		Expect(getBMC(ctx, ns, "bmc-1").ResourceVersion).To(Equal(changed.ResourceVersion))
		Expect(s.events()).To(BeEmpty())
	})
})

// startBMCManager runs a manager with the BMC inventory for namespace ns until the spec ends, logging to
// logger. It returns the Access the controller uses.
func startBMCManager(ctx context.Context, ns string, opts Options, logger logr.Logger) *bmcaccess.Access {
	mgr, err := env.NewManager(testenv.ManagerOptions{Logger: logger,
		ByObject: map[client.Object]cache.ByObject{&corev1.Secret{}: {Namespaces: map[string]cache.Config{ns: {}}}}})
	Expect(err).NotTo(HaveOccurred())
	access := bmcaccess.New(mgr.GetClient(), ns, newTestRegistry(), bmcaccess.Options{})
	Expect(mgr.Add(access)).To(Succeed())
	r := &Reconciler{Client: mgr.GetClient(), Access: access, Recorder: mgr.GetEventRecorder(ControllerName),
		Clock: clocktesting.NewFakeClock(bmcT0Suite), Options: opts}
	Expect(r.SetupWithManager(ctx, mgr)).To(Succeed())
	testenv.RunManager(context.WithoutCancel(ctx), GinkgoT(), mgr)
	return access
}

// eventsAbout lists the events.k8s.io Events regarding one object, as "Type Reason".
func eventsAbout(ctx context.Context, ns, name string) []string {
	var list eventsv1.EventList
	Expect(k8sClient.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Name == name {
			out = append(out, e.Type+" "+e.Reason)
		}
	}
	return out
}

var _ = Describe("BMC inventory in a running manager", func() {
	var ns string
	BeforeEach(func(ctx SpecContext) { ns = newNamespace(ctx) })

	bmcState := func(ctx context.Context, name, t string) func() string {
		return func() string { return bmcConditionState(getBMC(ctx, ns, name), t) }
	}

	It("flips CredentialsValid back when the Secret is rotated, through the Secret watch", func(ctx SpecContext) {
		startBMCManager(ctx, ns, Options{}, GinkgoLogr)
		m := startBMCMock(redfishmock.New())
		createBMCSecret(ctx, ns, "creds", bmcCredentials(wrongPassword))
		createBMC(ctx, ns, "bmc-1", bmcMockAddress(m, "1"), "creds", false)

		Eventually(bmcState(ctx, "bmc-1", v1alpha1.ConditionCredentialsValid)).WithTimeout(bmcWait).Should(Equal("False/AuthenticationFailed"))
		Expect(bmcConditionState(getBMC(ctx, ns, "bmc-1"), v1alpha1.ConditionReachable)).To(Equal("True/CheckSucceeded"))

		rotateBMCPassword(ctx, ns, "creds", goodPassword)
		Eventually(bmcState(ctx, "bmc-1", v1alpha1.ConditionCredentialsValid)).WithTimeout(bmcWait).Should(Equal("True/CheckSucceeded"))
		Expect(getBMC(ctx, ns, "bmc-1").Status.PowerState).To(Equal(v1alpha1.PowerOn))
		Eventually(func() []string { return eventsAbout(ctx, ns, "bmc-1") }).WithTimeout(bmcWait).Should(ConsistOf(
			"Warning "+EventBMCCredentialsInvalid, "Normal "+EventBMCRecovered))
	})

	It("reports unreachable BMCs without holding up the others", func(ctx SpecContext) {
		// The hanging BMC's check takes checkTimeout; the others must be done well before.
		const checkTimeout = 8 * time.Second
		startBMCManager(ctx, ns, Options{CheckTimeout: checkTimeout, MaxConcurrentReconciles: 4}, GinkgoLogr)
		createBMCSecret(ctx, ns, "creds", bmcCredentials(goodPassword))

		// A BMC that never answers: every request waits an hour on a clock that does not move, until the
		// check's timeout gives up on it.
		hanging := startBMCMock(redfishmock.New().WithClock(clocktesting.NewFakeClock(bmcT0Suite)))
		Expect(hanging.SetGlobalFaults(redfishmock.Faults{Latency: time.Hour})).To(Succeed())
		createBMC(ctx, ns, "hanging", bmcMockAddress(hanging, "1"), "creds", false)
		Eventually(hanging.Requests).WithTimeout(bmcWait).ShouldNot(BeEmpty(), "its check is under way")

		good := startBMCMock(redfishmock.New())
		createBMC(ctx, ns, "good", bmcMockAddress(good, "1"), "creds", false)
		createBMC(ctx, ns, "refused", closedBMCAddress(), "creds", false)

		By("finishing the other checks while the hanging one is still waiting")
		Eventually(bmcState(ctx, "good", v1alpha1.ConditionReachable)).WithTimeout(checkTimeout - time.Second).
			Should(Equal("True/CheckSucceeded"))
		Eventually(bmcState(ctx, "refused", v1alpha1.ConditionReachable)).WithTimeout(checkTimeout - time.Second).
			Should(Equal("False/Unreachable"))
		Expect(getBMC(ctx, ns, "hanging").Status.Conditions).To(BeEmpty(), "the hanging BMC's check has not ended yet")

		By("reporting the hanging BMC once its check times out")
		Eventually(bmcState(ctx, "hanging", v1alpha1.ConditionReachable)).WithTimeout(3 * checkTimeout).
			Should(Equal("False/Timeout"))
		Expect(bmcConditionMessage(getBMC(ctx, ns, "hanging"), v1alpha1.ConditionReachable)).To(ContainSubstring("did not answer within 8s"))
		Expect(bmcConditionState(getBMC(ctx, ns, "good"), v1alpha1.ConditionReachable)).To(Equal("True/CheckSucceeded"))
	})

	It("never lets a password reach a log line, an event, a status or an error", func(ctx SpecContext) {
		logs := &testenv.SyncBuffer{}
		logger := zap.New(zap.WriteTo(logs), zap.Level(zapcore.Level(-10)))
		access := startBMCManager(ctx, ns, Options{}, logger)

		m := startBMCMock(redfishmock.New())
		tlsMock := startBMCMock(redfishmock.New().WithTLS())
		rejecting := startBMCMock(redfishmock.New())
		Expect(rejecting.SetGlobalFaults(redfishmock.Faults{RejectAuth: true})).To(Succeed())

		createBMCSecret(ctx, ns, "wrong", bmcCredentials(wrongPassword))
		createBMCSecret(ctx, ns, "good", bmcCredentials(goodPassword))
		createBMCSecret(ctx, ns, "misspelt", map[string]string{"username": bmcUser, "passwd": goodPassword})
		createBMC(ctx, ns, "rotated", bmcMockAddress(m, "1"), "wrong", false)
		createBMC(ctx, ns, "misspelt", bmcMockAddress(m, "1"), "misspelt", false)
		createBMC(ctx, ns, "untrusted", bmcMockAddress(tlsMock, "1"), "good", false)
		createBMC(ctx, ns, "rejecting", bmcMockAddress(rejecting, "1"), "good", false)

		Eventually(bmcState(ctx, "rotated", v1alpha1.ConditionCredentialsValid)).WithTimeout(bmcWait).Should(Equal("False/AuthenticationFailed"))
		Eventually(bmcState(ctx, "misspelt", v1alpha1.ConditionCredentialsValid)).WithTimeout(bmcWait).Should(Equal("False/InvalidCredentials"))
		Eventually(bmcState(ctx, "untrusted", v1alpha1.ConditionReachable)).WithTimeout(bmcWait).Should(Equal("False/CertificateVerificationFailed"))
		Eventually(bmcState(ctx, "rejecting", v1alpha1.ConditionCredentialsValid)).WithTimeout(bmcWait).Should(Equal("False/AuthenticationFailed"))
		rotateBMCPassword(ctx, ns, "wrong", goodPassword)
		Eventually(bmcState(ctx, "rotated", v1alpha1.ConditionCredentialsValid)).WithTimeout(bmcWait).Should(Equal("True/CheckSucceeded"))

		By("collecting the errors the drivers return to a caller")
		var errs []string
		for _, name := range []string{"rejecting", "untrusted", "misspelt"} {
			_, d, err := access.ForHost(ctx, bmcaccess.Host{Node: "node-" + name})
			if err == nil {
				_, err = d.PowerState(ctx)
			}
			Expect(err).To(HaveOccurred())
			errs = append(errs, err.Error())
		}

		var bmcs v1alpha1.BMCList
		Expect(k8sClient.List(ctx, &bmcs, client.InNamespace(ns))).To(Succeed())
		statuses, err := json.Marshal(bmcs)
		Expect(err).NotTo(HaveOccurred())
		var evs eventsv1.EventList
		Eventually(func() []eventsv1.Event {
			Expect(k8sClient.List(ctx, &evs, client.InNamespace(ns))).To(Succeed())
			return evs.Items
		}).WithTimeout(bmcWait).Should(HaveLen(5), "4 warnings and 1 recovery")
		eventJSON, err := json.Marshal(evs)
		Expect(err).NotTo(HaveOccurred())

		outputs := map[string]string{
			"logs":   logs.String(),
			"status": string(statuses),
			"events": string(eventJSON),
			"errors": strings.Join(errs, "\n"),
		}
		Expect(outputs["logs"]).To(ContainSubstring("BMC state changed"), "the capture holds the controller's logs")
		Expect(outputs["logs"]).To(ContainSubstring("AuthenticationFailed"))
		for where, text := range outputs {
			for _, pw := range []string{goodPassword, wrongPassword} {
				escaped, _ := json.Marshal(pw)
				Expect(text).NotTo(ContainSubstring(pw), "a password in the %s", where)
				Expect(text).NotTo(ContainSubstring(strings.Trim(string(escaped), `"`)), "a JSON-escaped password in the %s", where)
				Expect(text).NotTo(ContainSubstring(url.QueryEscape(pw)), "a URL-escaped password in the %s", where)
			}
		}
	})
})
