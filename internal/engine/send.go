package engine

import (
	"context"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/pkg/leases"
)

// Sent is what Starter.Send came to.
type Sent struct {
	Ref Ref
	// Created: the request was created now; Adopted: the check had made it already.
	Created, Adopted bool
	// Skip: the target was not the check's to remediate after all (someone else's lease or request).
	// Deleted: the request went out before its lease, which someone else held, and was deleted again.
	Skip    *Skip
	Deleted bool
	// Err: nothing was started (or a request could not be deleted again, or a lease let go). LeaseErr:
	// the request stands, its lease could not be taken after it; the next pass takes it (Pass keeps the
	// lease of a request that lives) and its remediator waits for it or takes it.
	Err, LeaseErr error
	// At is when the request went out (Executor): the end of its target's detection.
	At time.Time
	// after: the request went out before its lease, which LeasesAfter takes.
	after   bool
	job     Job
	request *unstructured.Unstructured
}

// LeaseAfter reports whether a new request's Node lease may be taken after the request is created:
// metalheal's PowerCycleRemediation of a target that is not a control-plane one. Its remediator takes the
// lease itself, or finds it held by the check, before it touches the host, so the lease still comes
// before any action on the Node, and the request is out one round trip sooner (in a burst of failures,
// that round trip is a queue). For any other kind the lease comes first (medik8s' contract: nothing may
// act on a Node before its lease is held), and for a control-plane target always, under the
// control-plane claim.
func LeaseAfter(gvk schema.GroupVersionKind, controlPlane bool) bool {
	return gvk.Group == v1alpha1.GroupVersion.Group && gvk.Kind == "PowerCycleRemediation" && !controlPlane
}

// Send creates a new remediation request that the check (uid check) made for job j's target, and takes
// j's Node lease (none when j.Node is nil): first (TakeLease, over From the remediators of the target's
// requests, under the control-plane claim for a ControlPlane target; then CreateRequest) unless the lease
// may follow it (LeaseAfter): then LeasesAfter takes it, once every request of the check's pass went out.
// A lease someone else holds, another control-plane Node's and a request of the same name someone else
// made are a Skip; a lease taken for the latter is let go when it was taken for this request alone (Fresh).
func (s Starter) Send(ctx context.Context, j Job, request *unstructured.Unstructured, check types.UID) Sent {
	res := Sent{Ref: RefOf(request), job: j, request: request}
	// A control-plane target without a Node has no lease, but its request goes through the claim first.
	first := j.Node != nil && !LeaseAfter(request.GroupVersionKind(), j.ControlPlane) || j.Node == nil && j.ControlPlane
	if first {
		if res.Skip, res.Err = s.TakeLease(ctx, j.Node, j.ControlPlane, j.From...); res.Skip != nil || res.Err != nil {
			return res
		}
	}
	adopted, skip, err := s.CreateRequest(ctx, request, check)
	switch {
	case err != nil:
		res.Err = err
	case skip != nil:
		res.Skip = skip
		if first && j.Fresh && j.Node != nil {
			res.Err = s.Release(ctx, j.Node.Name)
		}
	default:
		res.Created, res.Adopted = !adopted, adopted
		// Nothing created now: no lease to take after it (the lease of a request that lives is kept: Pass).
		res.after = j.Node != nil && !first && !adopted
	}
	return res
}

// LeasesAfter takes, at most limit at once, the leases of the requests that went out before them (Send).
// Called once every request of the pass went out, so that in a burst of failures the API server stores
// the requests without the leases' writes in between. A lease taken by the request's own remediator
// meanwhile is taken over; one someone else took (the check's cache did not show it yet) makes the start
// a Skip, and the request is deleted again, before its remediator, which finds the lease held too, has
// done anything.
func (s Starter) LeasesAfter(ctx context.Context, limit int, sent []*Sent) {
	InParallel(ctx, limit, len(sent), func(ctx context.Context, i int) {
		if res := sent[i]; res != nil && res.after {
			*res = s.leaseAfter(ctx, *res)
		}
	})
}

func (s Starter) leaseAfter(ctx context.Context, res Sent) Sent {
	j := res.job
	res.after = false
	from := append(slices.Clone(j.From), leases.HolderIdentity(res.Ref.Kind, res.Ref.Name))
	skip, err := s.TakeLease(ctx, j.Node, false, from...)
	if skip == nil {
		res.LeaseErr = err
		return res
	}
	if err := Delete(ctx, s.Client, res.Ref, res.request.GetUID()); err != nil {
		return Sent{Ref: res.Ref, Err: fmt.Errorf("node %s: %s; deleting %s again: %w", j.Node.Name, skip.Message, res.Ref, err)}
	}
	return Sent{Ref: res.Ref, Skip: skip, Deleted: true}
}
