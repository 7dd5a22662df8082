package harness_test

import (
	"context"
	"os"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/clientcmd"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/testenv"
	"github.com/metalheal/metalheal/test/harness"
	"github.com/metalheal/metalheal/test/nodesim"
	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
	"github.com/metalheal/metalheal/test/world"
)

// A management cluster and two workload clusters whose Nodes share their names with each other and with
// a management Node: each workload cluster is its own control plane, reached through the kubeconfig
// Secret of its Cluster; its Machines name their Nodes by providerID and nodeRef; its BMCs name the
// host by node and Cluster; every host is a system of the one Redfish mock, and powering one off
// silences only its own Node, which its own node lifecycle controller marks Unknown.
func TestWorkloadClusters(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	crds, err := testenv.ClusterAPICRDs()
	g.Expect(err).NotTo(HaveOccurred())
	const grace = 4 * time.Second
	h, err := harness.Start(ctx, harness.Options{Workers: 1, Log: os.Stderr, LeaseInterval: time.Second, BootDelay: time.Second,
		World: world.Options{NodeMonitorGracePeriod: grace, ExtraCRDPaths: []string{crds}}})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(h.Stop)

	const ns = "fleet"
	node := harness.NodeName(1)
	g.Expect(h.GrantClusterNamespace(ctx, ns)).To(Succeed())
	start := time.Now()
	clusters, err := h.StartWorkloadClusters(ctx, harness.FleetOptions{Namespace: ns, MachineLabels: map[string]string{"pool": "workers"},
		Clusters: []harness.Workload{{Name: "a", Nodes: []string{node, "worker-2"}}, {Name: "b", Nodes: []string{node}}}})
	g.Expect(err).NotTo(HaveOccurred())
	t.Logf("two workload clusters started in %s", time.Since(start).Round(time.Millisecond))
	a, b := clusters[0], clusters[1]
	if procs, err := a.World.Processes(); err == nil {
		for _, p := range procs {
			if u, err := world.ProcessUsage(p.PID); err == nil {
				t.Logf("workload cluster a: %s RSS %d MiB", p.Name, u.RSS>>20)
			}
		}
	}

	t.Run("each cluster has its own Nodes, with providerIDs, and a lease namespace", func(t *testing.T) {
		g := NewWithT(t)
		for _, c := range clusters {
			var nodes corev1.NodeList
			g.Expect(c.Client.List(ctx, &nodes)).To(Succeed())
			g.Expect(nodes.Items).To(HaveLen(len(c.Nodes())), c.Name)
			for _, n := range nodes.Items {
				g.Expect(n.Spec.ProviderID).To(Equal(c.ProviderID(n.Name)))
			}
			g.Expect(c.Client.Get(ctx, client.ObjectKey{Name: harness.LeaseNamespace}, &corev1.Namespace{})).To(Succeed())
		}
		g.Expect(a.World.RESTConfig().Host).NotTo(Equal(b.World.RESTConfig().Host))
		g.Expect(h.Client.Get(ctx, client.ObjectKey{Name: node}, &corev1.Node{})).To(Succeed(), "the management cluster's Node of the same name")
	})

	t.Run("the management cluster describes them as Cluster API does", func(t *testing.T) {
		g := NewWithT(t)
		for _, c := range clusters {
			g.Expect(h.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: c.Name}, &clusterv1.Cluster{})).To(Succeed())

			secret := &corev1.Secret{}
			g.Expect(h.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: c.KubeconfigSecretName()}, secret)).To(Succeed())
			cfg, err := clientcmd.Load(secret.Data["value"])
			g.Expect(err).NotTo(HaveOccurred())
			for name, auth := range cfg.AuthInfos {
				g.Expect(auth.ClientCertificate+auth.ClientKey+auth.TokenFile).To(BeEmpty(), "user %s refers to files", name)
				g.Expect(auth.Exec).To(BeNil())
				g.Expect(auth.AuthProvider).To(BeNil())
			}
			for name, cl := range cfg.Clusters {
				g.Expect(cl.CertificateAuthority).To(BeEmpty(), "cluster %s refers to a file", name)
			}
			restCfg, err := clientcmd.RESTConfigFromKubeConfig(secret.Data["value"])
			g.Expect(err).NotTo(HaveOccurred())
			remote, err := client.New(restCfg, client.Options{})
			g.Expect(err).NotTo(HaveOccurred())
			n := &corev1.Node{}
			g.Expect(remote.Get(ctx, client.ObjectKey{Name: node}, n)).To(Succeed())
			g.Expect(n.Spec.ProviderID).To(Equal(c.ProviderID(node)), "the Secret reaches cluster %s", c.Name)

			for _, nodeName := range c.Nodes() {
				m := &clusterv1.Machine{}
				g.Expect(h.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: c.MachineName(nodeName)}, m)).To(Succeed())
				g.Expect(m.Spec.ClusterName).To(Equal(c.Name))
				g.Expect(m.Spec.ProviderID).To(Equal(c.ProviderID(nodeName)))
				g.Expect(m.Status.NodeRef.Name).To(Equal(nodeName))
				g.Expect(m.Labels).To(HaveKeyWithValue("pool", "workers"))
				g.Expect(m.Labels).To(HaveKeyWithValue(clusterv1.ClusterNameLabel, c.Name))
				g.Expect(m.OwnerReferences).To(ContainElement(And(HaveField("Kind", "MachineSet"), HaveField("Controller", HaveValue(BeTrue())))))

				bmc := &v1alpha1.BMC{}
				g.Expect(h.Client.Get(ctx, client.ObjectKey{Namespace: harness.Namespace, Name: c.BMCName(nodeName)}, bmc)).To(Succeed())
				g.Expect(bmc.Spec.NodeName).To(Equal(nodeName))
				g.Expect(bmc.Spec.Cluster).To(HaveValue(Equal(v1alpha1.ClusterReference{Namespace: ns, Name: c.Name})))
				g.Expect(bmc.Spec.Address).To(HaveSuffix(h.Mock.SystemPath(c.SystemID(nodeName))))
			}
		}
	})

	t.Run("the manager may read the kubeconfig Secrets and delete Machines in the Clusters' namespace only", func(t *testing.T) {
		g := NewWithT(t)
		cfg, err := clientcmd.BuildConfigFromFlags("", h.ManagerKubeconfig)
		g.Expect(err).NotTo(HaveOccurred())
		manager, err := client.New(cfg, client.Options{Scheme: harness.Scheme()})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(manager.Get(ctx, client.ObjectKey{Namespace: ns, Name: a.KubeconfigSecretName()}, &corev1.Secret{})).To(Succeed())
		machine := &clusterv1.Machine{}
		machine.Namespace, machine.Name = ns, a.MachineName("worker-2")
		g.Expect(manager.Delete(ctx, machine, client.DryRunAll)).To(Succeed(), "delete on Machines in %s", ns)
		err = manager.Get(ctx, client.ObjectKey{Namespace: "default", Name: "anything"}, &corev1.Secret{})
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "Secrets elsewhere: %v", err)
	})

	t.Run("one host powered off: only its own Node goes Unknown, in its own cluster", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(h.Mock.SystemIDs()).To(ContainElements("a."+node, "a.worker-2", "b."+node))
		g.Expect(h.HostOfSystem(a.SystemID(node))).To(Equal(ns + "/a/" + node))
		g.Expect(h.HostOfSystem(harness.SystemID(node))).To(Equal(node))

		g.Expect(h.Mock.SetPowerState(a.SystemID(node), redfishmock.PowerOff)).To(Succeed())
		g.Eventually(func(g Gomega) {
			g.Expect(readyIn(ctx, g, a.Client, node)).To(Equal(corev1.ConditionUnknown))
		}).WithTimeout(grace + 10*time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
		g.Expect(readyIn(ctx, g, b.Client, node)).To(Equal(corev1.ConditionTrue))
		g.Expect(readyIn(ctx, g, a.Client, "worker-2")).To(Equal(corev1.ConditionTrue))
		g.Expect(readyIn(ctx, g, h.Client, node)).To(Equal(corev1.ConditionTrue))
		g.Expect(b.Sim.State(node)).To(Equal(nodesim.StateRunning))

		g.Expect(h.Mock.SetPowerState(a.SystemID(node), redfishmock.PowerOn)).To(Succeed())
		g.Eventually(func(g Gomega) {
			g.Expect(readyIn(ctx, g, a.Client, node)).To(Equal(corev1.ConditionTrue))
		}).WithTimeout(20 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	})

	t.Run("Stop forgets a cluster in the management cluster and ends its processes", func(t *testing.T) {
		g := NewWithT(t)
		procs, err := b.World.Processes()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(b.Stop(ctx)).To(Succeed())
		for _, p := range procs {
			_, err := world.ProcessUsage(p.PID)
			g.Expect(err).To(MatchError(world.ErrNoProcess), "%s still runs", p.Name)
		}
		for key, o := range map[client.ObjectKey]client.Object{
			{Namespace: ns, Name: b.Name}:                         &clusterv1.Cluster{},
			{Namespace: ns, Name: b.MachineName(node)}:            &clusterv1.Machine{},
			{Namespace: ns, Name: b.KubeconfigSecretName()}:       &corev1.Secret{},
			{Namespace: harness.Namespace, Name: b.BMCName(node)}: &v1alpha1.BMC{},
		} {
			g.Expect(apierrors.IsNotFound(h.Client.Get(ctx, key, o))).To(BeTrue(), "%T %s is left", o, key)
		}
		g.Expect(h.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: a.Name}, &clusterv1.Cluster{})).To(Succeed(), "the other cluster stays")
	})
}

// readyIn is the status of a Node's Ready condition in a cluster.
func readyIn(ctx context.Context, g Gomega, c client.Client, name string) corev1.ConditionStatus {
	n := &corev1.Node{}
	g.Expect(c.Get(ctx, client.ObjectKey{Name: name}, n)).To(Succeed())
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status
		}
	}
	return ""
}
