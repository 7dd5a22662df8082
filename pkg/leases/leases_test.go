package leases

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func TestHolderIdentityAndLeaseName(t *testing.T) {
	g := NewWithT(t)
	g.Expect(HolderIdentity("PowerCycleRemediation", "worker-3")).To(Equal("PowerCycleRemediation-worker-3"))
	g.Expect(HolderIdentity("NodeMaintenance", "nm-1")).To(Equal("NodeMaintenance-nm-1"))
	g.Expect(QualifiedHolderIdentity("NodeHealthCheck", "remediation.metalheal.io", "workers")).
		To(Equal("NodeHealthCheck.remediation.metalheal.io-workers"))
	g.Expect(QualifiedHolderIdentity("NodeHealthCheck", "remediation.metalheal.io", "workers")).
		NotTo(Equal(HolderIdentity("NodeHealthCheck", "workers")), "a metalheal check is not medik8s' check of the same name")
	g.Expect(LeaseName("worker-3")).To(Equal("node-worker-3"))
}

func TestValidUntil(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	mt := func(d time.Duration) *metav1.MicroTime { v := metav1.NewMicroTime(t0.Add(d)); return &v }
	tests := []struct {
		name      string
		spec      coordinationv1.LeaseSpec
		now       time.Time
		wantUntil time.Time
		wantValid bool
	}{
		{name: "fresh", spec: coordinationv1.LeaseSpec{RenewTime: mt(0), LeaseDurationSeconds: new(int32(60))}, now: t0, wantUntil: t0.Add(time.Minute), wantValid: true},
		{name: "valid at the expiry instant", spec: coordinationv1.LeaseSpec{RenewTime: mt(0), LeaseDurationSeconds: new(int32(60))}, now: t0.Add(time.Minute), wantUntil: t0.Add(time.Minute), wantValid: true},
		{name: "expired just after", spec: coordinationv1.LeaseSpec{RenewTime: mt(0), LeaseDurationSeconds: new(int32(60))}, now: t0.Add(time.Minute + time.Microsecond), wantUntil: t0.Add(time.Minute)},
		{name: "renew time wins over acquire time", spec: coordinationv1.LeaseSpec{AcquireTime: mt(-time.Hour), RenewTime: mt(0), LeaseDurationSeconds: new(int32(60))}, now: t0, wantUntil: t0.Add(time.Minute), wantValid: true},
		{name: "acquire time when never renewed", spec: coordinationv1.LeaseSpec{AcquireTime: mt(-30 * time.Second), LeaseDurationSeconds: new(int32(60))}, now: t0, wantUntil: t0.Add(30 * time.Second), wantValid: true},
		{name: "no duration is invalid", spec: coordinationv1.LeaseSpec{RenewTime: mt(0)}, now: t0},
		{name: "no times is invalid", spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: new(int32(60))}, now: t0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			until, valid := ValidUntil(&coordinationv1.Lease{Spec: tt.spec}, tt.now)
			g.Expect(valid).To(Equal(tt.wantValid))
			g.Expect(until.Equal(tt.wantUntil)).To(BeTrue(), "until %v, want %v", until, tt.wantUntil)
		})
	}
}

func TestNewManagerValidates(t *testing.T) {
	c := fake.NewClientBuilder().Build()
	clk := clocktesting.NewFakeClock(time.Time{})
	tests := []struct {
		name   string
		client client.Client
		clock  clock.PassiveClock
		holder string
		opts   []Option
		want   string
	}{
		{name: "no client", clock: clk, holder: "h", want: "client"},
		{name: "no clock", client: c, holder: "h", want: "clock"},
		{name: "no holder", client: c, clock: clk, want: "holder identity"},
		{name: "empty namespace", client: c, clock: clk, holder: "h", opts: []Option{WithNamespace("")}, want: "namespace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			m, err := NewManager(tt.client, tt.holder, tt.clock, tt.opts...)
			g.Expect(m).To(BeNil())
			g.Expect(err).To(MatchError(ContainSubstring(tt.want)))
		})
	}

	g := NewWithT(t)
	m, err := NewManager(c, "h", clk)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(m.HolderIdentity()).To(Equal("h"))
	g.Expect(m.Namespace()).To(Equal(DefaultNamespace))
}
