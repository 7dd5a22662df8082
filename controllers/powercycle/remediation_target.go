package powercycle

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
)

// clusterAPIGroup is Cluster API's core group, whose Machines own the remediation requests that
// Cluster API's MachineHealthCheck creates.
const clusterAPIGroup = "cluster.x-k8s.io"

// ownerMachine returns the remediation's owner reference to a Cluster API Machine, if it has one.
func ownerMachine(pcr *v1alpha1.PowerCycleRemediation) *metav1.OwnerReference {
	for i, ref := range pcr.OwnerReferences {
		gv, err := schema.ParseGroupVersion(ref.APIVersion)
		if err == nil && gv.Group == clusterAPIGroup && ref.Kind == "Machine" {
			return &pcr.OwnerReferences[i]
		}
	}
	return nil
}

// resolveNodeName finds the node a remediation acts on (see nodeNameOf), reading the owning Machine
// when the request names no node itself.
func (r *RemediationReconciler) resolveNodeName(ctx context.Context, pcr *v1alpha1.PowerCycleRemediation) (string, error) {
	var machine *unstructured.Unstructured
	if ref := ownerMachine(pcr); ref != nil && pcr.Annotations[v1alpha1.AnnotationNodeName] == "" {
		var err error
		if machine, err = r.getMachine(ctx, pcr.Namespace, ref); err != nil {
			return "", err
		}
	}
	return nodeNameOf(pcr, machine), nil
}

// nodeNameOf is the node a remediation acts on: the remediation.medik8s.io/node-name annotation
// (medik8s, and our checkers), else the nodeRef of the owning Machine (Cluster API), else the
// remediation's own name (Cluster API names the request after the Machine, NodeHealthCheck after the
// Node).
func nodeNameOf(pcr *v1alpha1.PowerCycleRemediation, machine *unstructured.Unstructured) string {
	if n := pcr.Annotations[v1alpha1.AnnotationNodeName]; n != "" {
		return n
	}
	if machine != nil {
		if n, _, _ := unstructured.NestedString(machine.Object, "status", "nodeRef", "name"); n != "" {
			return n
		}
	}
	return pcr.Name
}

// refuseNodeElsewhere refuses, for good, a request owned by a Cluster API Machine whose Node is not the
// Node of that name in this cluster (see nodeElsewhere): in Cluster API's usual topology the Machines
// live in a management cluster and their Nodes in workload clusters, where node names repeat
// (worker-0), and the remediator acts only on the cluster it runs in. Acting on the same-named Node here
// would cordon, taint and power-cycle a healthy host of the wrong cluster. The question is asked while
// the request has not acted yet (Pending), each time it is looked at; a request that passed it keeps
// acting on the node it found.
func (r *RemediationReconciler) refuseNodeElsewhere(ctx context.Context, s *scope) (refused bool, err error) {
	if c := s.condition(v1alpha1.ConditionSucceeded); c != nil && c.Reason == v1alpha1.ReasonNodeNotInThisCluster {
		_, err := r.refuse(ctx, s, c.Reason, c.Message) // stays refused: nothing to write unless it changed
		return true, err
	}
	ref := ownerMachine(s.pcr)
	if p := s.status().Phase; ref == nil || (p != "" && p != v1alpha1.PhasePending) {
		return false, nil
	}
	why, err := r.nodeElsewhere(ctx, s, ref)
	if err != nil || why == "" {
		return false, err
	}
	msg := fmt.Sprintf("Refused: %s. The remediator acts only on Nodes of the cluster it runs in; nothing was done to "+
		"node %s of this cluster, its host or its lease", why, s.status().NodeName)
	news, err := r.refuse(ctx, s, v1alpha1.ReasonNodeNotInThisCluster, msg)
	if news {
		s.log.Info("Refused a request whose Node is in another cluster", "node", s.status().NodeName, "machine", ref.Name)
		r.opts.Recorder.Eventf(s.pcr, nil, corev1.EventTypeWarning, EventNodeNotInThisCluster, ActionPowerCycle, "%s", msg)
	}
	return true, err
}

// nodeElsewhere tells why the node a Machine-owned request names, in this cluster, is not that
// Machine's Node, or "" when it is (or when nothing shows otherwise: a Machine that is gone, a node not
// found yet, for pending to wait on as for any request). The Node here is the Machine's when it carries
// the Machine's providerID (Cluster API matches a Machine to its Node by it), or when the Machine's
// cluster has no <cluster>-kubeconfig Secret: its Nodes are then read in this cluster, as the
// MachineHealthCheck reads them. A cluster with that Secret is a workload cluster (perhaps this one, for
// a self-hosted management cluster, whose Nodes carry their Machines' providerIDs).
func (r *RemediationReconciler) nodeElsewhere(ctx context.Context, s *scope, ref *metav1.OwnerReference) (string, error) {
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
	secret := cluster + kubeconfigSecretSuffix
	err = r.opts.APIReader.Get(ctx, client.ObjectKey{Namespace: s.pcr.Namespace, Name: secret}, &corev1.Secret{})
	switch {
	case apierrors.IsNotFound(err):
		return "", nil
	case err == nil:
		return fmt.Sprintf("the Node of Machine %s/%s is in Cluster API workload cluster %s (Secret %s holds its kubeconfig), "+
			"and node %s of this cluster is not it (providerID %q, the Machine's %q)",
			s.pcr.Namespace, ref.Name, cluster, secret, st.NodeName, providerIDOf(node), providerID), nil
	case apierrors.IsForbidden(err) && node != nil:
		return fmt.Sprintf("node %s of this cluster is not the Node of Machine %s/%s (providerID %q, the Machine's %q), "+
			"and the Machine's cluster %s may be a workload cluster (the manager may not read Secret %s)",
			st.NodeName, s.pcr.Namespace, ref.Name, providerIDOf(node), providerID, cluster, secret), nil
	case apierrors.IsForbidden(err):
		return "", nil
	default:
		return "", fmt.Errorf("reading Secret %s/%s: %w", s.pcr.Namespace, secret, err)
	}
}

// kubeconfigSecretSuffix names, after a Cluster's name, the Secret that holds its workload cluster's
// kubeconfig (Cluster API's convention).
const kubeconfigSecretSuffix = "-kubeconfig"

func providerIDOf(node *corev1.Node) string {
	if node == nil {
		return ""
	}
	return node.Spec.ProviderID
}

// getMachine reads the owning Machine straight from the API server, in whatever version the owner
// reference names. A Machine that is gone (or replaced by another of the same name), or a cluster
// without Cluster API, yields nil.
func (r *RemediationReconciler) getMachine(ctx context.Context, namespace string, ref *metav1.OwnerReference) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(ref.APIVersion)
	u.SetKind(ref.Kind)
	err := r.opts.APIReader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.Name}, u)
	switch {
	case apierrors.IsNotFound(err), meta.IsNoMatchError(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading owning Machine %s/%s: %w", namespace, ref.Name, err)
	case u.GetUID() != ref.UID:
		return nil, nil
	}
	return u, nil
}

// deleteMachine deletes the owning Machine, so that its owner (a MachineSet, a control plane) replaces
// it. A Machine already gone, or replaced by another of the same name, counts as deleted.
func (r *RemediationReconciler) deleteMachine(ctx context.Context, namespace string, ref *metav1.OwnerReference) error {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(schema.FromAPIVersionAndKind(ref.APIVersion, ref.Kind))
	m.SetNamespace(namespace)
	m.SetName(ref.Name)
	err := r.opts.Client.Delete(ctx, m, client.Preconditions{UID: &ref.UID})
	switch {
	case err == nil, apierrors.IsNotFound(err), apierrors.IsConflict(err), meta.IsNoMatchError(err):
		return nil
	default:
		return fmt.Errorf("deleting Machine %s/%s: %w", namespace, ref.Name, err)
	}
}
