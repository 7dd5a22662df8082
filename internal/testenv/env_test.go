package testenv

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// An Env starts with the shared namespaces; worlds get a namespace each and a fake clock; a test manager
// runs until the test ends.
func TestEnvAndWorlds(t *testing.T) {
	g := NewWithT(t)
	env, err := Up(EnvOptions{Namespaces: []string{"shared-a", "shared-b"}})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { g.Expect(env.Stop()).To(Succeed()) })
	for _, ns := range []string{"shared-a", "shared-b"} {
		g.Expect(env.Client.Get(t.Context(), client.ObjectKey{Name: ns}, &corev1.Namespace{})).To(Succeed())
	}

	generated := env.NewWorld(t.Context(), t, WorldOptions{GenerateNamespace: "w-"})
	ns := &corev1.Namespace{}
	g.Expect(env.Client.Get(t.Context(), client.ObjectKey{Name: generated.Namespace}, ns)).To(Succeed())
	g.Expect(generated.Namespace).To(HavePrefix("w-"))
	g.Expect(generated.Clock.Now()).To(Equal(ns.CreationTimestamp.Add(time.Second)), "a second after the namespace was made")

	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	named := env.NewWorld(t.Context(), t, WorldOptions{Namespace: "scenario-1", Start: start})
	g.Expect(named.Namespace).To(Equal("scenario-1"))
	g.Expect(named.Clock.Now()).To(Equal(start))
	g.Expect(env.NewWorld(t.Context(), t, WorldOptions{Start: start}).Namespace).To(BeEmpty())

	mgr, err := env.NewManager(ManagerOptions{Namespaces: []string{named.Namespace}, LeaseNamespace: "shared-a"})
	g.Expect(err).NotTo(HaveOccurred())
	RunManager(t.Context(), t, mgr)
	g.Eventually(func() bool { return mgr.GetCache().WaitForCacheSync(t.Context()) }).Should(BeTrue())
}
