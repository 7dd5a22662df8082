package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/internal/backoff"
	"github.com/metalheal/metalheal/internal/gates"
	"github.com/metalheal/metalheal/pkg/leases"
)

// Skip reasons every check gives a target it does not remediate, besides the admission's
// (gates.SkipControlPlaneBusy, gates.SkipLeaseHeldByOther): status skipReason and the skipped metrics'
// reason label.
const (
	// SkipExcluded: the target's Node is labelled remediation.medik8s.io/exclude-from-remediation=true.
	SkipExcluded = "Excluded"
	// SkipOwnedByOtherCheck: another check owns the target (the overlapping rule).
	SkipOwnedByOtherCheck = "OwnedByOtherCheck"
	// SkipRemediationExists: a request of the name the check would create exists, and someone else made it.
	SkipRemediationExists = "RemediationExists"
	// SkipBackingOff: the target was remediated too often lately; its next remediation waits
	// (remediationBackoff).
	SkipBackingOff = "BackingOff"
)

// Skip is why a start does not happen: a gate refused it (Gate), or what the writes found (Starter) was not
// what the check decided from, its cache lagging behind someone else's write. It is the target's
// skipReason and skipMessage, and its event (Event).
type Skip struct {
	Reason, Message string
	// Holder holds the lease that refused the start, until Until (a lease held by someone else).
	Holder string
	Until  time.Time
	// Retry is when to look again: a held lease's end, the back-off hold's, or a control-plane start's
	// recheck.
	Retry time.Time
	// Hold is the back-off's decision when it holds the start, NewHold when that hold begins now, Window
	// the back-off's window (for the event).
	Hold    *backoff.Decision
	NewHold bool
	Window  time.Duration
}

// Starter makes a check's writes that start or keep a remediation, in the cluster of its Nodes: the Nodes'
// leases and the remediation requests. Both kinds write through it, so that a lease and a request mean
// the same whoever made them.
type Starter struct {
	// Leases is the check's lease manager (its holder identity) in the cluster of its Nodes.
	Leases *leases.Manager
	// Duration is how long a lease is taken for.
	Duration time.Duration
	// Claim and Cluster start a control-plane remediation one at a time (gates.ControlPlaneClaim); Check is
	// the check's key there (its kind and name, as ClaimKey makes it).
	Claim   *gates.ControlPlaneClaim
	Cluster gates.NodeCluster
	Check   string
	// Client creates requests; Live reads one that exists already from the API server.
	Client client.Client
	Live   client.Reader
}

// ClaimKey is a check's key in the manager's control-plane claim: "<Kind> <namespace>/<name>", or
// "<Kind> <name>" for a cluster-scoped check.
func ClaimKey(kind string, check types.NamespacedName) string {
	if check.Namespace == "" {
		return kind + " " + check.Name
	}
	return kind + " " + check.String()
}

// ClaimChecks lists, for the claim's warm-up (gates.ControlPlaneClaim.Expect), the keys of the checks of
// kind that are not being deleted, from reader (a cache).
func ClaimChecks(reader client.Reader, kind string, newList func() client.ObjectList) func(ctx context.Context) ([]string, error) {
	return func(ctx context.Context) ([]string, error) {
		list := newList()
		if err := reader.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
			return nil, err
		}
		objs, err := meta.ExtractList(list)
		if err != nil {
			return nil, err
		}
		keys := make([]string, 0, len(objs))
		for _, o := range objs {
			if obj, ok := o.(client.Object); ok && obj.GetDeletionTimestamp() == nil {
				keys = append(keys, ClaimKey(kind, client.ObjectKeyFromObject(obj)))
			}
		}
		return keys, nil
	}
}

// TakeLease takes or renews node's lease for the check, over from the remediators of its own requests
// (from) should one of them have taken it first. A new remediation of a control-plane target (cpStart)
// takes it under the manager's control-plane claim, and only while no other control-plane Node's lease is
// held, read from the API server: checks deciding at the same moment from the same cache, of either kind,
// do not start two control-plane Nodes. Nothing may act on a Node before its lease is held (medik8s'
// contract): a lease someone else holds, or another control-plane Node's, is a Skip. A target without a
// Node (nil: a control-plane Machine whose Node is gone, or never joined) has no lease to take, but its
// start goes through the claim all the same.
func (s Starter) TakeLease(ctx context.Context, node *corev1.Node, cpStart bool, from ...string) (*Skip, error) {
	take := func(ctx context.Context) error {
		if node == nil {
			return nil
		}
		return s.Leases.RequestLeaseFrom(ctx, node, s.Duration, from...)
	}
	name := ""
	if node != nil {
		name = node.Name
	}
	var err error
	if cpStart {
		var refusal *gates.ControlPlaneRefusal
		if refusal, err = s.Claim.Start(ctx, s.Cluster, s.Check, name, take); refusal != nil {
			return &Skip{Reason: gates.SkipControlPlaneBusy, Message: refusal.Message(), Retry: refusal.RetryAt}, nil
		}
	} else {
		err = take(ctx)
	}
	var held *leases.AlreadyHeldError
	switch {
	case err == nil:
		return nil, nil
	case errors.As(err, &held):
		return &Skip{Reason: gates.SkipLeaseHeldByOther, Message: fmt.Sprintf("The node's lease is held by %q", held.Holder),
			Holder: held.Holder, Until: held.Until}, nil
	}
	return nil, fmt.Errorf("taking the lease of node %s: %w", name, err)
}

// CreateRequest creates a remediation request the check (uid) made from a template. One of the same name
// that the check made already (its cache had not shown it yet) is adopted; one anyone else made is a
// RemediationExists skip: an overlap the check reports, never a success.
func (s Starter) CreateRequest(ctx context.Context, obj *unstructured.Unstructured, check types.UID) (adopted bool, skip *Skip, err error) {
	ref := RefOf(obj)
	if err := s.Client.Create(ctx, obj); !apierrors.IsAlreadyExists(err) {
		if err != nil {
			return false, nil, fmt.Errorf("creating %s: %w", ref, err)
		}
		return false, nil, nil
	}
	existing := &unstructured.Unstructured{}
	existing.SetGroupVersionKind(obj.GroupVersionKind())
	if err := s.Live.Get(ctx, client.ObjectKeyFromObject(obj), existing); err != nil {
		return false, nil, fmt.Errorf("reading the existing %s: %w", ref, err)
	}
	if OwnedBy(existing, check) {
		return true, nil, nil
	}
	msg := fmt.Sprintf("%s exists and was not created by this check", ref)
	if who := OwnerDescription(existing); who != "" {
		msg = fmt.Sprintf("%s exists, created by %s", ref, who)
	}
	return false, &Skip{Reason: SkipRemediationExists, Message: msg}, nil
}

// OwnedBy reports whether obj has an owner reference to the object with uid.
func OwnedBy(obj metav1.Object, uid types.UID) bool {
	return slices.ContainsFunc(obj.GetOwnerReferences(), func(o metav1.OwnerReference) bool { return o.UID == uid })
}

// OwnerDescription names the health check that owns obj, if any, e.g. "NodeHealthCheck workers".
func OwnerDescription(obj metav1.Object) string {
	for _, o := range obj.GetOwnerReferences() {
		if strings.HasSuffix(o.Kind, "HealthCheck") {
			return o.Kind + " " + o.Name
		}
	}
	return ""
}
