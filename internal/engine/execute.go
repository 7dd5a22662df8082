package engine

import (
	"context"
	"fmt"

	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// InParallel runs do for 0..n-1, at most limit at once, and waits for them: a check's writes about
// different objects go out together, not one round trip after the other. do reports through its own
// results.
func InParallel(ctx context.Context, limit, n int, do func(ctx context.Context, i int)) {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(limit, 1))
	for i := range n {
		g.Go(func() error {
			do(gctx, i)
			return nil
		})
	}
	_ = g.Wait()
}

// Delete deletes the request ref (uid, when set, the one the check read, as a precondition: never a
// request of the same name made since); one gone already is nothing to do. The remediator's finalizer may
// keep it a while.
func Delete(ctx context.Context, c client.Client, ref Ref, uid types.UID) error {
	var opts []client.DeleteOption
	if uid != "" {
		opts = append(opts, client.Preconditions{UID: &uid})
	}
	if err := c.Delete(ctx, ref.Object(), opts...); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting %s: %w", ref, err)
	}
	return nil
}

// Release lets go of the check's lease on node: the check no longer remediates it.
func (s Starter) Release(ctx context.Context, node string) error {
	if err := s.Leases.InvalidateLease(ctx, node); err != nil {
		return fmt.Errorf("releasing the lease of node %s: %w", node, err)
	}
	return nil
}
