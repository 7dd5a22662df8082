package harness_test

import (
	"context"
	"os"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/test/harness"
)

// The real manager, under config/default's RBAC, checks every BMC of the world.
func TestManagerChecksBMCsWithDeployedRBAC(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	h, err := harness.Start(ctx, harness.Options{Workers: 2, Log: os.Stderr})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(h.Stop)

	m, err := h.StartManager(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(m.Kill)

	for _, node := range []string{harness.NodeName(1), harness.NodeName(2)} {
		g.Eventually(func(g Gomega) {
			var b v1alpha1.BMC
			g.Expect(h.Client.Get(ctx, client.ObjectKey{Namespace: harness.Namespace, Name: node}, &b)).To(Succeed())
			g.Expect(b.Status.PowerState).To(Equal(v1alpha1.PowerOn))
			g.Expect(b.Status.Conditions).To(ContainElement(And(
				HaveField("Type", v1alpha1.ConditionReachable), HaveField("Status", BeEquivalentTo("True")))))
			g.Expect(b.Status.Conditions).To(ContainElement(And(
				HaveField("Type", v1alpha1.ConditionCredentialsValid), HaveField("Status", BeEquivalentTo("True")))))
		}).WithTimeout(60*time.Second).WithPolling(250*time.Millisecond).Should(Succeed(), "see %s", m.LogPath)
	}
	logs, err := os.ReadFile(m.LogPath)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(logs)).NotTo(ContainSubstring(harness.BMCPassword), "the manager logged a BMC password")
	g.Expect(string(logs)).NotTo(ContainSubstring("forbidden"), "the deployed RBAC lacks a permission the manager uses")
}
