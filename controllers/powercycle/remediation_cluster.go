package powercycle

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/bmcaccess"
	"github.com/metalheal/metalheal/internal/workload"
)

// The Node's cluster. A request acts on a Node of the cluster the remediator runs in, or, for a request
// owned by a Cluster API Machine whose Node lives in a workload cluster, of that workload cluster: node
// names repeat across clusters (the management cluster's worker-1 is not edge-a's), so the cordon, the
// taints, the wait for Ready and the node lease happen in the Node's own cluster, reached through the
// Cluster's kubeconfig Secret (internal/workload: one connection per workload cluster, shared with the
// health checks), and the host's BMC is the one that names that cluster (spec.cluster). Which cluster is
// decided once, while the request has not acted (Pending), and recorded in status.clusterName.

// nodeCluster is where a request's Node lives, and how to reach it.
type nodeCluster struct {
	// key is the Cluster (namespace and name) of a workload cluster; zero for the remediator's own.
	key types.NamespacedName
	// nodes reads the Node from a cache; live reads it from the API server.
	nodes client.Reader
	live  client.Reader
	// writer updates the Node (taints).
	writer client.Client
	// leases reads and writes node leases, leaseLive reads them from the API server.
	leases    client.Client
	leaseLive client.Reader
}

// local is the cluster the remediator runs in.
func (r *RemediationReconciler) local() *nodeCluster {
	return &nodeCluster{nodes: r.opts.Client, live: r.opts.APIReader, writer: r.opts.Client,
		leases: r.opts.LeaseClient, leaseLive: r.opts.APIReader}
}

// nodeClusterOf returns the cluster of the request's Node (see status.clusterName), reached once per
// reconcile. A workload cluster that cannot be reached is a *workload.Error (see clusterUnreachable).
func (r *RemediationReconciler) nodeClusterOf(ctx context.Context, s *scope) (*nodeCluster, error) {
	if s.cluster != nil {
		return s.cluster, nil
	}
	name := s.status().ClusterName
	if name == "" {
		s.cluster = r.local()
		return s.cluster, nil
	}
	key := types.NamespacedName{Namespace: s.pcr.Namespace, Name: name}
	c, remote, err := r.opts.WorkloadClusters.Get(ctx, r.opts.APIReader, key)
	switch {
	case err != nil:
		return nil, err
	case !remote:
		return nil, &workload.Error{Cluster: key, Err: fmt.Errorf("its kubeconfig Secret %s%s is gone", name, workload.KubeconfigSecretSuffix)}
	}
	s.cluster = remoteCluster(key, c)
	s.clusterReached()
	return s.cluster, nil
}

func remoteCluster(key types.NamespacedName, c *workload.Cluster) *nodeCluster {
	return &nodeCluster{key: key, nodes: c.Nodes(), live: c.Client(), writer: c.Client(), leases: c.Client(), leaseLive: c.Client()}
}

// host is the request's host, as the BMCs name it.
func hostOf(pcr *v1alpha1.PowerCycleRemediation) bmcaccess.Host {
	h := bmcaccess.Host{Node: pcr.Status.NodeName}
	if pcr.Status.ClusterName != "" {
		h.Cluster = types.NamespacedName{Namespace: pcr.Namespace, Name: pcr.Status.ClusterName}
	}
	return h
}

// refuseNodeElsewhere places a request owned by a Cluster API Machine (see locate) while it has not acted
// yet (Pending), each time it is looked at until it is placed, and refuses it for good when its Node is
// not the Node of that name here and its workload cluster cannot be known (NodeNotInThisCluster): acting
// on the same-named Node here would taint and power-cycle a healthy host of the wrong cluster.
func (r *RemediationReconciler) refuseNodeElsewhere(ctx context.Context, s *scope) (refused bool, err error) {
	if c := s.condition(v1alpha1.ConditionSucceeded); c != nil && c.Reason == v1alpha1.ReasonNodeNotInThisCluster {
		_, err := r.refuse(ctx, s, c.Reason, c.Message) // stays refused: nothing to write unless it changed
		return true, err
	}
	ref := ownerMachine(s.pcr)
	if p := s.status().Phase; ref == nil || s.status().ClusterName != "" || (p != "" && p != v1alpha1.PhasePending) {
		return false, nil
	}
	why, err := r.locate(ctx, s, ref)
	if err != nil || why == "" {
		return false, err
	}
	msg := fmt.Sprintf("Refused: %s. Nothing was done to node %s of this cluster, its host or its lease", why, s.status().NodeName)
	news, err := r.refuse(ctx, s, v1alpha1.ReasonNodeNotInThisCluster, msg)
	if news {
		s.log.Info("Refused a request whose Node is in another cluster", "node", s.status().NodeName, "machine", ref.Name)
		r.opts.Recorder.Eventf(s.pcr, nil, corev1.EventTypeWarning, EventNodeNotInThisCluster, ActionPowerCycle, "%s", msg)
	}
	return true, err
}

// locate decides in which cluster the Node of a Machine-owned request lives, recording a workload
// cluster in status.clusterName, or tells why the request must be refused. The Node here is the
// Machine's when it carries the Machine's providerID (Cluster API matches a Machine to its Node by it: a
// self-hosted management cluster), when the Machine's Cluster has no <cluster>-kubeconfig Secret (its
// Nodes are then read here, as the MachineHealthCheck reads them), or when that kubeconfig reaches this
// very Node (same UID: it is this cluster's own). Otherwise the Node lives in that workload cluster,
// reached through the Secret; one that cannot be reached is a *workload.Error (see clusterUnreachable).
// Refused: a Secret the manager may not read, of a Cluster that exists, when the same-named Node here is
// another host (without the Cluster, its Machines' Nodes are this cluster's). Nothing shows otherwise for
// a Machine that is gone, or a Node not found here while the Secret cannot be read: the request goes on
// here, and pending waits for the Node as for any request.
func (r *RemediationReconciler) locate(ctx context.Context, s *scope, ref *metav1.OwnerReference) (string, error) {
	machine, err := r.getMachine(ctx, s.pcr.Namespace, ref)
	if err != nil || machine == nil {
		return "", err
	}
	st := s.status()
	if st.NodeName == "" {
		st.NodeName = nodeNameOf(s.pcr, machine)
	}
	cluster, _, _ := unstructured.NestedString(machine.Object, "spec", "clusterName")
	providerID, _, _ := unstructured.NestedString(machine.Object, "spec", "providerID")
	node, err := r.getNode(ctx, s)
	if err != nil && !apierrors.IsNotFound(err) {
		return "", fmt.Errorf("reading node %s: %w", st.NodeName, err)
	}
	if cluster == "" || (node != nil && providerID != "" && node.Spec.ProviderID == providerID) {
		return "", nil
	}
	key := types.NamespacedName{Namespace: s.pcr.Namespace, Name: cluster}
	remote, isRemote, err := r.opts.WorkloadClusters.Get(ctx, r.opts.APIReader, key)
	var forbidden *workload.ForbiddenError
	switch {
	case errors.As(err, &forbidden):
		if node == nil {
			return "", nil
		}
		if exists, err := r.clusterExists(ctx, ref.APIVersion, key); err != nil || !exists {
			return "", err
		}
		return fmt.Sprintf("node %s of this cluster is not the Node of Machine %s/%s (providerID %q, the Machine's %q), "+
			"and the Machine's cluster %s may be a workload cluster: %v",
			st.NodeName, s.pcr.Namespace, ref.Name, providerIDOf(node), providerID, cluster, forbidden), nil
	case err != nil:
		return "", err
	case !isRemote, node != nil && sameNode(ctx, remote, node):
		return "", nil
	}
	st.ClusterName = cluster
	s.cluster = remoteCluster(key, remote)
	s.nodeRead, s.node, s.nodeError = false, nil, nil // what was read here was another host's Node
	s.log.Info("The Node is in a workload cluster", "cluster", key, "node", st.NodeName)
	return "", nil
}

// clusterExists reports whether the Cluster API Cluster key exists, read in the version of the Machine's
// owner reference (apiVersion).
func (r *RemediationReconciler) clusterExists(ctx context.Context, apiVersion string, key types.NamespacedName) (bool, error) {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(apiVersion)
	u.SetKind("Cluster")
	err := r.opts.APIReader.Get(ctx, key, u)
	switch {
	case apierrors.IsNotFound(err), meta.IsNoMatchError(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("reading Cluster %s: %w", key, err)
	}
	return true, nil
}

// sameNode reports whether the workload cluster's Node of that name is node itself (the same object,
// by UID): the workload cluster is the management cluster.
func sameNode(ctx context.Context, c *workload.Cluster, node *corev1.Node) bool {
	other := &corev1.Node{}
	return c.Nodes().Get(ctx, client.ObjectKeyFromObject(node), other) == nil && other.UID == node.UID
}

func providerIDOf(node *corev1.Node) string {
	if node == nil {
		return ""
	}
	return node.Spec.ProviderID
}

// clusterUnreachable reports that the request's workload cluster cannot be reached (err, a
// *workload.Error): WorkloadClusterReachable=False and one warning per change, and says when to look
// again: after waits that start at the poll interval and double up to retryBackoff.max. Nothing is done
// to the host meanwhile; what the request had done stays recorded, and it goes on from there once the
// cluster answers (the phase's own deadlines apply then).
func (r *RemediationReconciler) clusterUnreachable(s *scope, err error) ctrl.Result {
	since, down := s.now, false
	if c := s.condition(v1alpha1.ConditionWorkloadClusterReachable); c != nil && c.Status == metav1.ConditionFalse {
		since, down = c.LastTransitionTime.Time, true
	}
	s.setCondition(v1alpha1.ConditionWorkloadClusterReachable, metav1.ConditionFalse, v1alpha1.ReasonWorkloadClusterUnreachable, err.Error())
	if !down {
		r.opts.Recorder.Eventf(s.pcr, nil, corev1.EventTypeWarning, EventWorkloadClusterUnreachable, ActionPowerCycle,
			"Node %s: %s", s.status().NodeName, truncate(err.Error(), maxAttemptMessage))
	}
	return ctrl.Result{RequeueAfter: growingWait(since, s.now, r.opts.PowerPollInterval, s.spec.backoffMax)}
}

// clusterReached records that a workload cluster that could not be reached answers again.
func (s *scope) clusterReached() {
	if c := s.condition(v1alpha1.ConditionWorkloadClusterReachable); c != nil && c.Status == metav1.ConditionFalse {
		s.setCondition(v1alpha1.ConditionWorkloadClusterReachable, metav1.ConditionTrue, v1alpha1.ReasonAsExpected, "The workload cluster answers")
	}
}

// watchWorkloadNodes makes a workload cluster's Node changes bring the requests of those Nodes, as the
// local Node watch does (called once per new connection).
func (r *RemediationReconciler) watchWorkloadNodes(c controller.Controller) func(types.NamespacedName, *workload.Cluster) error {
	return func(key types.NamespacedName, wc *workload.Cluster) error {
		return c.Watch(source.Kind(wc.Cache(), client.Object(&corev1.Node{}),
			handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
				return r.claim.remediationsFor(ctx, bmcaccess.Host{Cluster: key, Node: o.GetName()}.String(), nil)
			}), nodeChangePredicate()))
	}
}
