// Package kindwatch watches kinds known only at run time (the remediation templates and requests a health
// check names) through the manager's cache, without a reconcile ever waiting for one of them.
//
// A health check may name any kind, and the manager may not be allowed to list it (no ClusterRole grants
// it), or its informer may not sync for another reason. controller-runtime's cache then blocks every read
// of that kind until the informer syncs, which is never, and a source.Kind watch on it retries forever: one
// check naming such a kind stopped every check of its controller. A Watcher instead:
//
//   - starts a kind's informer without waiting for it, and reports the kind Pending until it has synced;
//     the checks that name it are not looked at further meanwhile, and nothing reads the kind;
//   - when it has not synced within SyncTimeout, stops it, asks the API server directly why (forbidden, not
//     found, ...), and reports the kind Failed with a NotWatchableError: the checks that name it are
//     disabled, with that reason in their status;
//   - tries again after a backoff (RetryMin doubling up to RetryMax), so that granting the permission, or
//     installing the CRD, heals the checks without a restart;
//   - stops a kind's informer as soon as no check names it any more, so nothing keeps failing in the log.
//
// Every check says on each reconcile which kinds it needs (Want) and is forgotten when it is gone (Forget).
// Each change of a kind's state enqueues the checks that name it, through the controller's queue (Source),
// where the kind's own events are mapped to checks by its handler too.
//
// Informers are shared by every controller on one cache: an informer this package started is removed from
// the cache only when no Watcher on that cache uses it. Informers of typed kinds (in the scheme: the
// manager's own, which its other controllers watch too) are never removed.
package kindwatch
