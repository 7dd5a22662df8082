package bmcinventory

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/bmcaccess"
	"github.com/metalheal/metalheal/pkg/bmc"
)

// Defaults of Options.
const (
	DefaultCheckInterval           = 5 * time.Minute
	DefaultCheckTimeout            = 10 * time.Second
	DefaultMaxConcurrentReconciles = 20
)

// ControllerName names the BMC inventory controller (logs, metrics, events).
const ControllerName = "bmc"

// Options tune the BMC inventory.
type Options struct {
	// Interval is the period of the checks of one BMC: each BMC is checked once per interval, in its
	// own slot (two checks are between Interval/2 and 1.5×Interval apart). Zero means
	// DefaultCheckInterval.
	Interval time.Duration
	// CheckTimeout bounds one check (building the driver and one PowerState call). Zero means
	// DefaultCheckTimeout.
	CheckTimeout time.Duration
	// MaxConcurrentReconciles is how many BMCs are checked at once, so that slow or unreachable BMCs
	// never hold up the others. Zero means DefaultMaxConcurrentReconciles.
	MaxConcurrentReconciles int
}

// NodeRemediations tells whether a remediation is at work on a host (bmcaccess.Host's spelling).
// The power-cycle remediator (*powercycle.RemediationReconciler) is one.
type NodeRemediations interface {
	Remediating(ctx context.Context, host string) bool
}

// Reconciler is the BMC inventory: it checks every BMC in the Access's namespace (reachability,
// credentials and power state) when the BMC changes, when its credentials Secret changes, and once every
// Interval, and reports the result in the BMC's status and, on change, in events. An administrator thus
// learns that a BMC is misconfigured before the node it guards fails.
//
// The periodic checks are spread evenly over the interval: each BMC has its own slot in it (one of
// bmcSlotsPerInterval, from a hash of its UID), so 5,000 BMCs created or restarted together do not come
// due together every interval, and the BMCs of a slot are checked as a group. The status is written
// only when it changes or lastChecked needs a refresh (StatusRefreshAge).
type Reconciler struct {
	// Client reads BMCs (from the cache) and writes their status.
	Client client.Client
	// Access builds and caches the drivers; share it with the power-cycle remediator.
	Access *bmcaccess.Access
	// Recorder emits events on the BMCs.
	Recorder events.EventRecorder
	// Clock stamps lastChecked and decides when a check is due.
	Clock clock.PassiveClock
	// Options tune the checks.
	Options Options
	// Remediations, if set, tells which nodes a power-cycle remediation is at work on. The periodic check
	// of a healthy BMC whose host is being power-cycled is skipped: it would only compete with the
	// remediator for the BMC (one call at a time per BMC), and the remediation's BMCReady condition
	// reports the BMC meanwhile. A BMC that changed, or was unhealthy, is still checked at once.
	Remediations NodeRemediations

	mu      sync.Mutex
	checked map[types.NamespacedName]bmcCheckRecord
}

func (r *Reconciler) interval() time.Duration {
	if r.Options.Interval > 0 {
		return r.Options.Interval
	}
	return DefaultCheckInterval
}

func (r *Reconciler) checkTimeout() time.Duration {
	if r.Options.CheckTimeout > 0 {
		return r.Options.CheckTimeout
	}
	return DefaultCheckTimeout
}

// SetupWithManager registers the BMC field indexes (through the Access) and the controller: BMCs in the
// Access's namespace, and the Secrets and ConfigMaps there, mapped to the BMCs that use them (for their
// credentials or their CA bundle).
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if r.Client == nil || r.Access == nil || r.Recorder == nil || r.Clock == nil {
		return errors.New("the BMC inventory needs a Client, an Access, a Recorder and a Clock")
	}
	if err := r.Access.SetupIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}
	workers := r.Options.MaxConcurrentReconciles
	if workers <= 0 {
		workers = DefaultMaxConcurrentReconciles
	}
	ns := r.Access.Namespace()
	inNamespace := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetNamespace() == ns })
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		// Our own status writes do not change the generation: they need no reconcile.
		For(&v1alpha1.BMC{}, builder.WithPredicates(inNamespace, predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.bmcsUsingSecret), builder.WithPredicates(inNamespace)).
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(r.bmcsUsingConfigMap), builder.WithPredicates(inNamespace)).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Complete(r)
}

// bmcsUsingSecret maps a Secret to the BMCs whose credentials or CA bundle it holds.
func (r *Reconciler) bmcsUsingSecret(ctx context.Context, secret client.Object) []reconcile.Request {
	return r.bmcsMatching(ctx, secret,
		client.MatchingFields{bmcaccess.IndexSecretName: secret.GetName()},
		client.MatchingFields{bmcaccess.IndexCABundle: bmcaccess.CABundleIndexValue(v1alpha1.CABundleSecret, secret.GetName())})
}

// bmcsUsingConfigMap maps a ConfigMap to the BMCs whose CA bundle it holds.
func (r *Reconciler) bmcsUsingConfigMap(ctx context.Context, cm client.Object) []reconcile.Request {
	return r.bmcsMatching(ctx, cm,
		client.MatchingFields{bmcaccess.IndexCABundle: bmcaccess.CABundleIndexValue(v1alpha1.CABundleConfigMap, cm.GetName())})
}

// bmcsMatching returns the BMCs in obj's namespace that match any of the field selectors, each once.
func (r *Reconciler) bmcsMatching(ctx context.Context, obj client.Object, selectors ...client.MatchingFields) []reconcile.Request {
	var reqs []reconcile.Request
	seen := map[types.NamespacedName]bool{}
	for _, sel := range selectors {
		var list v1alpha1.BMCList
		if err := r.Client.List(ctx, &list, client.InNamespace(obj.GetNamespace()), sel); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Listing the BMCs of an object failed", "object", klog.KObj(obj))
			continue
		}
		for _, b := range list.Items {
			key := types.NamespacedName{Namespace: b.Namespace, Name: b.Name}
			if !seen[key] {
				seen[key] = true
				reqs = append(reqs, reconcile.Request{NamespacedName: key})
			}
		}
	}
	return reqs
}

// Reconcile checks one BMC when a check is due, and says when the next one is.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	b := &v1alpha1.BMC{}
	// The cache's own object, not a copy (thousands of BMCs are read every interval): report copies it
	// before it writes. Nothing else here modifies it.
	if err := r.Client.Get(ctx, req.NamespacedName, b, client.UnsafeDisableDeepCopy); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(ctx, req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if b.Namespace != r.Access.Namespace() {
		return ctrl.Result{}, nil
	}
	in, err := r.Access.Read(ctx, b) // read once: check builds the driver from them
	if err != nil {
		return ctrl.Result{}, err
	}
	cur := bmcCheckRecord{uid: b.UID, generation: b.Generation, secretVersion: in.SecretVersion(), caBundleVersion: in.CABundleVersion}
	last := r.last(req.NamespacedName)
	if last != nil && last.uid != b.UID {
		r.Access.Forget(ctx, last.uid) // deleted and recreated under the same name while we looked away
	}
	now := r.Clock.Now()
	due, next := bmcCheckDue(last, cur, b, now, r.interval())
	if !due {
		if last == nil {
			// Checked before this process started, and healthy then: keep the slot it was given.
			cur.healthy, cur.next = true, next
			r.remember(req.NamespacedName, cur)
		}
		return ctrl.Result{RequeueAfter: next.Sub(now)}, nil
	}

	if r.Remediations != nil && bmcKnownGood(last, cur, b) && r.Remediations.Remediating(ctx, bmcaccess.HostOf(b).String()) {
		Checks.WithLabelValues(bmcCheckSkippedRemediating).Inc()
		return r.planNext(req.NamespacedName, b, cur, true, now), nil
	}
	a, err := r.check(ctx, b, in)
	if err != nil {
		return ctrl.Result{}, err
	}
	now = r.Clock.Now()
	Checks.WithLabelValues(bmcCheckResult(a)).Inc()
	if err := r.report(ctx, b, a, now); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	return r.planNext(req.NamespacedName, b, cur, a.healthy(), now), nil
}

// planNext remembers b as checked (or its check skipped) at now, healthy or not, and plans its next check
// in its first slot at least half an interval later.
func (r *Reconciler) planNext(key types.NamespacedName, b *v1alpha1.BMC, cur bmcCheckRecord, healthy bool, now time.Time) ctrl.Result {
	cur.healthy = healthy
	cur.next = bmcSlotAfter(bmcPhase(b.UID, r.interval()), now, r.interval())
	r.remember(key, cur)
	return ctrl.Result{RequeueAfter: cur.next.Sub(now)}
}

// bmcCheckSkippedRemediating is the result a periodic check is counted with when it was skipped because
// the BMC's host is being power-cycled.
const bmcCheckSkippedRemediating = "SkippedRemediating"

// check reads the BMC's power state once, bounded by the check timeout, and assesses the outcome. in is
// what Access.Read read of the BMC's Secret and CA bundle. It returns an error only for what is not the
// BMC's fault: that is retried.
func (r *Reconciler) check(ctx context.Context, b *v1alpha1.BMC, in bmcaccess.Inputs) (bmcAssessment, error) {
	checkCtx, cancel := context.WithTimeout(ctx, r.checkTimeout())
	defer cancel()
	state := bmc.PowerStateUnknown
	d, err := r.Access.ForBMCWithInputs(checkCtx, b, in)
	if err != nil && bmcaccess.Reason(err) == "" {
		return bmcAssessment{}, err
	}
	if err == nil {
		state, err = d.PowerState(checkCtx)
	}
	if ctx.Err() != nil {
		// The manager is stopping: the BMC did not time out, we gave up on it.
		return bmcAssessment{}, ctx.Err()
	}
	ctrl.LoggerFrom(ctx).V(4).Info("Checked BMC", "BMC", klog.KObj(b), "powerState", state, "reason", bmcaccess.Reason(err))
	return bmcAssess(b, state, err, r.checkTimeout()), nil
}

// report writes the assessment into the BMC's status when an administrator would see a difference, or
// when lastChecked is due for a refresh (bmcReportedStatus), and, when the BMC's state changed, logs it
// and emits an event.
func (r *Reconciler) report(ctx context.Context, b *v1alpha1.BMC, a bmcAssessment, now time.Time) error {
	oldReachable := meta.FindStatusCondition(b.Status.Conditions, v1alpha1.ConditionReachable).DeepCopy()
	oldCredentials := meta.FindStatusCondition(b.Status.Conditions, v1alpha1.ConditionCredentialsValid).DeepCopy()
	oldPower := b.Status.PowerState

	// The reconcile's logger already names the BMC. (Adding values would encode them on every check.)
	log := ctrl.LoggerFrom(ctx)
	status, write := bmcReportedStatus(b.Status, b.Generation, a, now, bmcRefreshAge(r.interval()))
	if write {
		patch := client.MergeFrom(b)
		b = b.DeepCopy() // b is the cache's object (see Reconcile)
		b.Status = status
		if err := r.Client.Status().Patch(ctx, b, patch); err != nil {
			return fmt.Errorf("updating the status of BMC %s: %w", klog.KObj(b), err)
		}
	} else {
		log.V(5).Info("BMC status unchanged: not written")
	}

	if ev := bmcTransitionEvent(oldReachable, oldCredentials, a); ev != nil {
		r.Recorder.Eventf(b, nil, ev.kind, ev.reason, ActionCheckBMC, "%s", ev.note)
		log.Info("BMC state changed", "reachable", a.reachable.Reason, "credentialsValid", a.credentials.Reason, "powerState", a.power)
	} else if oldPower != a.power {
		log.V(1).Info("Host power state changed", "from", oldPower, "to", a.power)
	}
	return nil
}

func (r *Reconciler) last(key types.NamespacedName) *bmcCheckRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec, ok := r.checked[key]
	if !ok {
		return nil
	}
	return &rec
}

func (r *Reconciler) remember(key types.NamespacedName, rec bmcCheckRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.checked == nil {
		r.checked = map[types.NamespacedName]bmcCheckRecord{}
	}
	r.checked[key] = rec
}

// forget drops what is known of a deleted BMC, closing its driver.
func (r *Reconciler) forget(ctx context.Context, key types.NamespacedName) {
	r.mu.Lock()
	rec, ok := r.checked[key]
	delete(r.checked, key)
	r.mu.Unlock()
	if ok {
		r.Access.Forget(ctx, rec.uid)
	}
}
