package powercycle

import (
	"context"
	"fmt"

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
