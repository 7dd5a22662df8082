package mhc

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/metalheal/metalheal/api/v1alpha1"
)

// A workload cluster's admin controls its Nodes, and so their size: what the kubelet lists of images and
// volumes, and managed fields. The manager is shared by every workload cluster, so what it keeps of a
// workload cluster's Nodes must be as slim as what it keeps of its own: a large Node is stored without
// the bulk, and with everything a check reads.
var _ = Describe("A workload cluster's admin with large Nodes", func() {
	It("does not grow the manager: the workload cluster's Node cache keeps them slimmed", func(ctx SpecContext) {
		w := newWorld(ctx)
		Expect(k8s.Create(ctx, newCluster(w.ns, "big"))).To(Succeed())
		Expect(k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "big-kubeconfig", Namespace: w.ns},
			Data: map[string][]byte{"value": workloadEnv.KubeConfig}})).To(Succeed())

		name := w.nodeName("big")
		node := w.createNode(ctx, workloadK8s, name, corev1.ConditionTrue, time.Hour)
		node.Labels = map[string]string{v1alpha1.LabelExcludeFromRemediation: "false"}
		Expect(workloadK8s.Update(ctx, node)).To(Succeed())
		for i := range 50 {
			node.Status.Images = append(node.Status.Images, corev1.ContainerImage{
				Names: []string{fmt.Sprintf("registry.example.com/tenant/image-%02d@sha256:%064d", i, i)}, SizeBytes: 1 << 30})
		}
		node.Status.VolumesInUse = []corev1.UniqueVolumeName{"kubernetes.io/csi/ebs^vol-1"}
		node.Status.VolumesAttached = []corev1.AttachedVolume{{Name: "kubernetes.io/csi/ebs^vol-1", DevicePath: "/dev/xvdb"}}
		Expect(workloadK8s.Status().Update(ctx, node)).To(Succeed())

		w.createCheck(ctx, "big", func(mhc *v1alpha1.MachineHealthCheck) {
			mhc.Spec.ClusterName = "big"
			mhc.Spec.Selector.MatchLabels = map[string]string{"pool": "big"}
		})
		w.createMachine(ctx, "big-m", withCluster("big"), withLabels("pool", "big"), withNodeRef(name))
		w.reconcile(ctx, "big")

		key := types.NamespacedName{Namespace: w.ns, Name: "big"}
		Expect(w.r.remotes.Connected(key)).To(BeTrue())
		c, remote, err := w.r.remotes.Get(ctx, k8s, key)
		Expect(err).NotTo(HaveOccurred())
		Expect(remote).To(BeTrue())
		nodes := c.Nodes()
		Eventually(func(g Gomega) {
			cached := &corev1.Node{}
			g.Expect(nodes.Get(ctx, types.NamespacedName{Name: name}, cached)).To(Succeed())
			g.Expect(cached.Status.Conditions).NotTo(BeEmpty(), "what a check reads is kept")
			g.Expect(cached.Labels).To(HaveKey(v1alpha1.LabelExcludeFromRemediation))
			g.Expect(cached.Status.Images).To(BeEmpty(), "the images the kubelet lists are not cached")
			g.Expect(cached.Status.VolumesInUse).To(BeEmpty())
			g.Expect(cached.Status.VolumesAttached).To(BeEmpty())
			g.Expect(cached.ManagedFields).To(BeEmpty())
		}).WithContext(ctx).WithTimeout(eventuallyTimeout).Should(Succeed())
	})
})
