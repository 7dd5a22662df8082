package engine

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/metalheal/metalheal/internal/gates"
	"github.com/metalheal/metalheal/pkg/leases"
)

var startT0 = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)

const self = "NodeHealthCheck.remediation.metalheal.io-self"

// starter is a Starter on a fake cluster whose control-plane Nodes are named cp-*.
func starter(t *testing.T, c client.Client) Starter {
	clk := clocktesting.NewFakeClock(startT0)
	lm, err := leases.NewManager(c, self, clk, leases.WithNamespace(leases.DefaultNamespace))
	if err != nil {
		t.Fatal(err)
	}
	return Starter{Leases: lm, Duration: 10 * time.Minute, Claim: &gates.ControlPlaneClaim{}, Client: c, Live: c,
		Cluster: gates.NodeCluster{Leases: c, LeaseNamespace: leases.DefaultNamespace, Clock: clk,
			IsControlPlane: func(_ context.Context, n string) (bool, error) { return n[:3] == "cp-", nil }}}
}

func node(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)}}
}

// TestStarterTakeLease: a lease is the check's unless someone else holds it; a control-plane start waits
// for no other control-plane Node's lease. Both kinds take their leases through it.
func TestStarterTakeLease(t *testing.T) {
	for name, tc := range map[string]struct {
		held    map[string]string // Node -> holder, before
		node    string
		cpStart bool
		from    []string
		want    string // the skip's reason, "" for the lease taken
	}{
		"a free lease is taken":                          {node: "w-0"},
		"our own lease is renewed":                       {held: map[string]string{"w-0": self}, node: "w-0"},
		"someone else's is a skip":                       {held: map[string]string{"w-0": "node-maintenance"}, node: "w-0", want: gates.SkipLeaseHeldByOther},
		"our own request's remediator's is taken over":   {held: map[string]string{"w-0": "PowerCycleRemediation-w-0"}, node: "w-0", from: []string{"PowerCycleRemediation-w-0"}},
		"a control-plane start while another cp is held": {held: map[string]string{"cp-1": "node-maintenance"}, node: "cp-0", cpStart: true, want: gates.SkipControlPlaneBusy},
		"a control-plane renewal is not a start":         {held: map[string]string{"cp-1": "node-maintenance", "cp-0": self}, node: "cp-0"},
		"a control-plane start beside a held worker":     {held: map[string]string{"w-0": "node-maintenance"}, node: "cp-0", cpStart: true},
		"a control-plane start whose own lease is held":  {held: map[string]string{"cp-0": "node-maintenance"}, node: "cp-0", cpStart: true, want: gates.SkipLeaseHeldByOther},
		// A control-plane Machine whose Node is gone, or never joined: no lease of its own, the claim all the same.
		"a Node-less control-plane start while a cp is held": {held: map[string]string{"cp-1": "node-maintenance"}, cpStart: true, want: gates.SkipControlPlaneBusy},
		"a Node-less control-plane start, none held":         {held: map[string]string{"w-0": "node-maintenance"}, cpStart: true},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			c := fake.NewClientBuilder().Build()
			for n, holder := range tc.held {
				other, err := leases.NewManager(c, holder, clocktesting.NewFakeClock(startT0), leases.WithNamespace(leases.DefaultNamespace))
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(other.RequestLease(t.Context(), node(n), time.Hour)).To(Succeed())
			}
			var n *corev1.Node
			if tc.node != "" {
				n = node(tc.node)
			}
			skip, err := starter(t, c).TakeLease(t.Context(), n, tc.cpStart, tc.from...)
			g.Expect(err).NotTo(HaveOccurred())
			if tc.want == "" {
				g.Expect(skip).To(BeNil())
				return
			}
			g.Expect(skip).NotTo(BeNil())
			g.Expect(skip.Reason).To(Equal(tc.want))
			if tc.want == gates.SkipLeaseHeldByOther {
				g.Expect(skip.Holder).To(Equal("node-maintenance"))
				g.Expect(skip.Message).To(Equal(`The node's lease is held by "node-maintenance"`))
				g.Expect(skip.Until).NotTo(BeZero())
			} else {
				g.Expect(skip.Retry).To(Equal(startT0.Add(gates.ControlPlaneRecheck)))
			}
		})
	}
}

// TestStarterCreateRequest: a request is created; one the check made already is adopted; one someone
// else made is a RemediationExists skip that names its maker.
func TestStarterCreateRequest(t *testing.T) {
	request := func(owner *metav1.OwnerReference) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("fence.example.com/v1")
		u.SetKind("FenceRemediation")
		u.SetNamespace("ns")
		u.SetName("w-0")
		if owner != nil {
			u.SetOwnerReferences([]metav1.OwnerReference{*owner})
		}
		return u
	}
	ours := &metav1.OwnerReference{APIVersion: "remediation.metalheal.io/v1alpha1", Kind: "NodeHealthCheck", Name: "self", UID: "self"}
	other := &metav1.OwnerReference{APIVersion: "remediation.metalheal.io/v1alpha1", Kind: "MachineHealthCheck", Name: "other", UID: "other"}
	for name, tc := range map[string]struct {
		existing    *unstructured.Unstructured
		wantAdopted bool
		wantSkip    string
	}{
		"none exists: created":           {},
		"ours exists: adopted":           {existing: request(ours), wantAdopted: true},
		"another check's exists: a skip": {existing: request(other), wantSkip: "FenceRemediation ns/w-0 exists, created by MachineHealthCheck other"},
		"anyone else's exists: a skip":   {existing: request(nil), wantSkip: "FenceRemediation ns/w-0 exists and was not created by this check"},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			b := fake.NewClientBuilder()
			if tc.existing != nil {
				b = b.WithObjects(tc.existing)
			}
			c := b.Build()
			adopted, skip, err := starter(t, c).CreateRequest(t.Context(), request(ours), "self")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(adopted).To(Equal(tc.wantAdopted))
			if tc.wantSkip == "" {
				g.Expect(skip).To(BeNil())
				got := request(nil)
				g.Expect(c.Get(t.Context(), client.ObjectKeyFromObject(got), got)).To(Succeed())
				g.Expect(OwnedBy(got, "self")).To(BeTrue())
				return
			}
			g.Expect(skip).To(Equal(&Skip{Reason: SkipRemediationExists, Message: tc.wantSkip}))
		})
	}
}
