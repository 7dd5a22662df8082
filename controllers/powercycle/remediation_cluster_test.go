package powercycle

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/metalheal/metalheal/api/v1alpha1"
)

// A management cluster whose healthy worker-1 shares its name with a hung worker-1 of a Cluster API
// workload cluster: a request for the workload Machine never acts on the management host. It is refused
// before anything is touched (no BMC call, no taint, no lease, no finalizer), with the conditions and one
// warning event saying why, whether our MachineHealthCheck (node-name annotation) or Cluster API's (only
// the owning Machine) created it. A self-hosted management cluster, whose Nodes carry their Machines'
// providerIDs, is served as before.
func testNodeOfAnotherCluster(t *testing.T, api *apiServer) {
	for name, tc := range map[string]struct {
		annotated   bool   // the request names its node (our MachineHealthCheck), or only its Machine (Cluster API)
		kubeconfig  bool   // the Machine's cluster has a <cluster>-kubeconfig Secret
		nodeID      string // the providerID of this cluster's Node of the Machine's node name
		unreadable  bool   // the manager may not read Secrets in the Machine's namespace
		wantRefused bool
	}{
		"our MachineHealthCheck's request for a workload cluster's Node": {
			annotated: true, kubeconfig: true, nodeID: "metal3://management-worker-1", wantRefused: true},
		"Cluster API's request for a workload cluster's Node": {
			kubeconfig: true, nodeID: "metal3://management-worker-1", wantRefused: true},
		"a Node here without a providerID": {
			annotated: true, kubeconfig: true, wantRefused: true},
		"the kubeconfig Secret not readable, and the providerIDs differ": {
			annotated: true, kubeconfig: true, nodeID: "metal3://management-worker-1", unreadable: true, wantRefused: true},
		"a self-hosted management cluster: the Node carries the Machine's providerID": {
			kubeconfig: true, nodeID: "metal3://workload-worker-1"},
		"the kubeconfig Secret not readable, and the Node carries the Machine's providerID": {
			annotated: true, kubeconfig: true, nodeID: "metal3://workload-worker-1", unreadable: true},
		"no kubeconfig Secret: the Machine's Nodes are in this cluster": {
			annotated: true, nodeID: "metal3://management-worker-1"},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			w, hosts := fakeHosts(t, api)
			if tc.unreadable {
				w.reconcilerOptions = func(o *RemediationReconcilerOptions) { o.APIReader = w.secretsForbidden() }
			}
			node := w.fakeHost("worker-1", nil)
			n := w.getNode(node)
			n.Spec.ProviderID = tc.nodeID
			w.must(w.c.Update(w.ctx, n))
			w.setReady(node, corev1.ConditionTrue)
			if tc.kubeconfig {
				w.must(w.c.Create(w.ctx, &corev1.Secret{
					ObjectMeta: metav1.ObjectMeta{Name: "workload-kubeconfig", Namespace: w.ns},
					Data:       map[string][]byte{"value": []byte("apiVersion: v1\nkind: Config\n")},
				}))
			}
			machine := &clusterv1.Machine{
				ObjectMeta: metav1.ObjectMeta{Name: "workload-md-0-x7k2p", Namespace: w.ns},
				Spec: clusterv1.MachineSpec{
					ClusterName:       "workload",
					ProviderID:        "metal3://workload-worker-1",
					Bootstrap:         clusterv1.Bootstrap{DataSecretName: new("bootstrap-data")},
					InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "Metal3Machine", Name: "workload-md-0-x7k2p"},
				},
			}
			w.must(w.c.Create(w.ctx, machine))
			machine.Status.NodeRef = clusterv1.MachineNodeReference{Name: node}
			w.must(w.c.Status().Update(w.ctx, machine))
			var annotations map[string]string
			if tc.annotated {
				annotations = map[string]string{v1alpha1.AnnotationNodeName: node}
			}
			key := w.remediation(machine.Name, spec(reboot, 1), annotations, metav1.OwnerReference{
				APIVersion: clusterv1.GroupVersion.String(), Kind: "Machine", Name: machine.Name, UID: machine.UID})
			host := hosts.Driver(fakeAddress(node))

			if !tc.wantRefused {
				w.drive(key, same(w.reconciler()), w.kubeletOnPowerOn(node, always), untilTerminal)
				p := w.get(key)
				g.Expect(conditionOf(p, v1alpha1.ConditionSucceeded)).To(MatchFields(v1alpha1.ReasonNodeReady, metav1.ConditionTrue))
				g.Expect(powerOps(host)).To(Equal([]string{"Off", "On"}), "the Machine's own host was power-cycled")
				g.Expect(w.countEvents("Warning " + EventNodeNotInThisCluster)).To(BeZero())
				return
			}

			r := w.reconciler()
			var results []ctrl.Result
			for range 3 { // its creation, and whatever else brings it back
				res, err := r.Reconcile(w.ctx, ctrl.Request{NamespacedName: key})
				g.Expect(err).NotTo(HaveOccurred())
				results = append(results, res)
				w.clock.Step(time.Minute)
			}
			g.Expect(host.Calls()).To(BeEmpty(), "the management host's BMC was never called")
			g.Expect(w.taintKeys(node)).To(BeEmpty())
			g.Expect(w.getNode(node).Spec.Unschedulable).To(BeFalse())
			g.Expect(w.lease(node)).To(BeNil())
			p := w.get(key)
			g.Expect(p.Finalizers).NotTo(ContainElement(v1alpha1.FinalizerPowerCycle))
			g.Expect(p.Status.Phase).To(Equal(v1alpha1.PhaseFailed))
			g.Expect(p.Status.Attempts).To(BeEmpty())
			g.Expect(conditionOf(p, v1alpha1.ConditionProcessing)).To(MatchFields(v1alpha1.ReasonNodeNotInThisCluster, metav1.ConditionFalse))
			g.Expect(conditionOf(p, v1alpha1.ConditionSucceeded)).To(MatchFields(v1alpha1.ReasonNodeNotInThisCluster, metav1.ConditionFalse))
			g.Expect(conditionOf(p, v1alpha1.ConditionProcessing).Message).To(And(
				ContainSubstring("workload"), ContainSubstring(machine.Name), ContainSubstring(node), ContainSubstring("nothing was done")))
			events := w.drainEvents()
			g.Expect(events).To(HaveLen(1), "one warning, and nothing else announced")
			g.Expect(events[0]).To(HavePrefix("Warning " + EventNodeNotInThisCluster + " "))
			g.Expect(r.Remediating(w.ctx, node)).To(BeFalse(), "a refused request holds no host")
			g.Expect(results).To(HaveEach(ctrl.Result{}), "nothing to come back for")

			// Deleted, it goes at once: no clean-up touches the host.
			w.must(w.c.Delete(w.ctx, p))
			steps := w.drive(key, same(r), nil, untilSettled)
			g.Expect(steps[len(steps)-1].gone).To(BeTrue())
			g.Expect(host.Calls()).To(BeEmpty())
		})
	}
}

// secretsForbidden is a reader straight from the API server that may not read Secrets, as the manager
// under config/default in a Cluster API namespace.
func (w *world) secretsForbidden() client.Reader {
	direct, err := client.NewWithWatch(w.api.cfg, client.Options{Scheme: w.api.scheme})
	w.must(err)
	return interceptor.NewClient(direct, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*corev1.Secret); ok {
				return apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, key.Name, nil)
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
}
