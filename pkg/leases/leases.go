package leases

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// DefaultNamespace is where medik8s-compatible node leases live.
const DefaultNamespace = "medik8s-leases"

// maxAttempts bounds how often RequestLease and InvalidateLease re-read and retry after losing a race.
const maxAttempts = 3

// HolderIdentity returns the holder identity of the object of kind and name that acts on a node, e.g.
// HolderIdentity("PowerCycleRemediation", "worker-3") is "PowerCycleRemediation-worker-3": medik8s' form.
func HolderIdentity(kind, name string) string {
	return kind + "-" + name
}

// QualifiedHolderIdentity returns the holder identity of an object whose kind name another project also
// uses: "<Kind>.<group>-<name>", e.g. "NodeHealthCheck.remediation.metalheal.io-workers". medik8s'
// NodeHealthCheck holds leases as "NodeHealthCheck-<name>"; were metalheal's to do the same, a metalheal
// check and a medik8s check of the same name would each take the other's lease for its own and both act
// on the node. Everyone else (node-maintenance-operator, medik8s) only compares holders for equality, so
// any distinct string is read correctly.
func QualifiedHolderIdentity(kind, group, name string) string {
	return kind + "." + group + "-" + name
}

// AnnotationHolderNamespace on a node lease records the namespace of its holder, for a holder whose
// identity names none: "<Kind>-<name>" of a namespaced object is the same string for the objects of that
// name in every namespace. Peers (medik8s, node-maintenance-operator) neither read nor write it, and keep
// reading the holder identity as they always did; a Manager made WithHolderNamespace writes it with every
// lease it takes or renews and counts a lease as its own only when it matches. A Manager without a holder
// namespace removes it from a lease it takes.
const AnnotationHolderNamespace = "remediation.metalheal.io/holder-namespace"

// Holder is who holds a lease: the holder identity everyone reads and, for a holder that records one, the
// namespace recorded beside it (AnnotationHolderNamespace; "" when none is).
type Holder struct {
	Identity  string
	Namespace string
}

// String names the holder for messages: its identity, and its namespace when one is recorded.
func (h Holder) String() string {
	if h.Namespace == "" {
		return h.Identity
	}
	return h.Identity + " (namespace " + h.Namespace + ")"
}

// LeaseName returns the name of nodeName's lease: "node-<nodename>".
func LeaseName(nodeName string) string {
	return "node-" + nodeName
}

// AlreadyHeldError means another holder has a valid lease on the node.
type AlreadyHeldError struct {
	// Holder is the current holder's identity.
	Holder string
	// Namespace is the namespace recorded beside it (AnnotationHolderNamespace), if any: a holder of our
	// own identity in another namespace is another holder.
	Namespace string
	// Until is when its lease expires unless renewed.
	Until time.Time
}

func (e *AlreadyHeldError) Error() string {
	return fmt.Sprintf("node lease is held by %q until %s", e.Holder, e.Until.UTC().Format(time.RFC3339))
}

// NamespaceNotFoundError means the lease namespace does not exist.
type NamespaceNotFoundError struct {
	Namespace string
	Err       error
}

func (e *NamespaceNotFoundError) Error() string {
	return fmt.Sprintf("lease namespace %q does not exist: %v", e.Namespace, e.Err)
}

func (e *NamespaceNotFoundError) Unwrap() error { return e.Err }

// Option configures a Manager.
type Option func(*Manager)

// WithNamespace keeps leases in ns instead of DefaultNamespace.
func WithNamespace(ns string) Option {
	return func(m *Manager) { m.namespace = ns }
}

// WithLiveReader reads a lease through r (the API server itself, e.g. a manager's API reader) once an
// attempt has lost a race with it. A cache-backed client shows a lease some time after it was written:
// re-reading the cache would find it missing, or as it was, again, and fail every attempt the same way
// (a create that finds the lease already there, an update that meets a newer version).
func WithLiveReader(r client.Reader) Option {
	return func(m *Manager) { m.live = r }
}

// WithHolderNamespace makes the Manager a holder of its identity in namespace ns: it records ns on every
// lease it takes or renews (AnnotationHolderNamespace), and counts a lease as its own only when the lease
// records ns too. Two namespaced objects of one kind and name in two namespaces are then two holders,
// though their identity, which peers read, is one. A lease of the same identity that records no namespace
// (written before holders recorded theirs) is not the Manager's own: whose it is, the caller decides
// (RequestLeaseFromHolders takes it over).
func WithHolderNamespace(ns string) Option {
	return func(m *Manager) { m.holderNamespace = ns }
}

// WithNamespaceCreation makes the Manager create the lease namespace when a lease is to be created and
// the namespace does not exist, then create the lease: for a cluster no one prepared for node leases, such
// as a Cluster API workload cluster (the management cluster's installation ships the namespace). Its client
// must then be allowed to create namespaces.
func WithNamespaceCreation() Option {
	return func(m *Manager) { m.createNamespace = true }
}

// Manager requests, renews and releases node leases for one holder.
type Manager struct {
	client          client.Client
	live            client.Reader // nil: client
	holder          string
	holderNamespace string
	clock           clock.PassiveClock
	namespace       string
	createNamespace bool
}

// reader is what attempt (from 0) reads the lease through: the client first, the live reader after a
// lost race.
func (m *Manager) reader(attempt int) client.Reader {
	if attempt > 0 && m.live != nil {
		return m.live
	}
	return m.client
}

// NewManager returns a Manager acting as holderIdentity (see HolderIdentity). Read the package
// documentation about which client to give it.
func NewManager(c client.Client, holderIdentity string, clk clock.PassiveClock, opts ...Option) (*Manager, error) {
	m := &Manager{client: c, holder: holderIdentity, clock: clk, namespace: DefaultNamespace}
	for _, o := range opts {
		o(m)
	}
	switch {
	case c == nil:
		return nil, errors.New("lease manager needs a client")
	case clk == nil:
		return nil, errors.New("lease manager needs a clock")
	case holderIdentity == "":
		return nil, errors.New("lease manager needs a holder identity")
	case m.namespace == "":
		return nil, errors.New("lease manager needs a namespace")
	}
	return m, nil
}

// HolderIdentity returns the identity the Manager holds leases as.
func (m *Manager) HolderIdentity() string { return m.holder }

// Holder returns the identity and the holder namespace the Manager holds leases as.
func (m *Manager) Holder() Holder { return Holder{Identity: m.holder, Namespace: m.holderNamespace} }

// Holds reports whether h is the Manager itself: the same identity and, for a Manager made
// WithHolderNamespace, the same namespace.
func (m *Manager) Holds(h Holder) bool {
	return h.Identity == m.holder && (m.holderNamespace == "" || h.Namespace == m.holderNamespace)
}

// Namespace returns the namespace the Manager keeps leases in.
func (m *Manager) Namespace() string { return m.namespace }

// RequestLease makes sure we hold node's lease for duration (rounded up to whole seconds) from now: it
// creates the lease, renews ours, or takes over one that has expired or has no holder (counting a
// transition). A valid lease held by someone else yields an *AlreadyHeldError and leaves the lease
// untouched. A missing lease namespace yields a *NamespaceNotFoundError.
func (m *Manager) RequestLease(ctx context.Context, node *corev1.Node, duration time.Duration) error {
	return m.RequestLeaseFrom(ctx, node, duration)
}

// RequestLeaseFrom is RequestLease that also takes over a valid lease held by one of from: holders that act
// for us, such as the remediator of a health check's own request, which took the node's lease a moment
// before the check did. A holder identity in from matches whatever namespace the lease records beside it.
// The hand-over counts a transition and is logged.
func (m *Manager) RequestLeaseFrom(ctx context.Context, node *corev1.Node, duration time.Duration, from ...string) error {
	return m.requestLease(ctx, node, duration, func(h Holder) bool { return slices.Contains(from, h.Identity) })
}

// RequestLeaseFromHolders is RequestLeaseFrom for holders named exactly: a lease is taken over from one of
// from only when it records the same identity and the same namespace (none, for a Holder without one).
func (m *Manager) RequestLeaseFromHolders(ctx context.Context, node *corev1.Node, duration time.Duration, from ...Holder) error {
	return m.requestLease(ctx, node, duration, func(h Holder) bool { return slices.Contains(from, h) })
}

// requestLease is RequestLease that also takes over a valid lease whose holder takeOver accepts.
func (m *Manager) requestLease(ctx context.Context, node *corev1.Node, duration time.Duration, takeOver func(Holder) bool) error {
	if node == nil || node.Name == "" || node.UID == "" {
		return errors.New("requesting a node lease needs a node with a name and a uid")
	}
	if duration < time.Second {
		return fmt.Errorf("lease duration %s is shorter than one second", duration)
	}
	seconds := durationSeconds(duration)

	var lastErr error
	for attempt := range maxAttempts {
		done, err := m.requestOnce(ctx, m.reader(attempt), node, seconds, takeOver)
		if done {
			return err
		}
		lastErr = err
	}
	return fmt.Errorf("requesting lease %s/%s: gave up after %d attempts: %w", m.namespace, LeaseName(node.Name), maxAttempts, lastErr)
}

// requestOnce makes one attempt; done is false when it lost a race and should be retried.
func (m *Manager) requestOnce(ctx context.Context, r client.Reader, node *corev1.Node, seconds int32, takeOver func(Holder) bool) (done bool, err error) {
	logger := log.FromContext(ctx).WithValues("node", klog.KObj(node), "holder", m.holder)
	now := metav1.NewMicroTime(m.clock.Now())
	key := client.ObjectKey{Namespace: m.namespace, Name: LeaseName(node.Name)}

	lease := &coordinationv1.Lease{}
	if err := r.Get(ctx, key, lease); err != nil {
		if !apierrors.IsNotFound(err) {
			return true, fmt.Errorf("getting lease %s: %w", key, err)
		}
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       &m.holder,
				LeaseDurationSeconds: &seconds,
				AcquireTime:          &now,
				RenewTime:            &now,
				LeaseTransitions:     new(int32(0)),
			},
		}
		setNodeOwner(lease, node)
		m.recordHolderNamespace(lease)
		switch err := m.client.Create(ctx, lease); {
		case err == nil:
			logger.V(4).Info("Acquired node lease")
			return true, nil
		case apierrors.IsAlreadyExists(err):
			return false, err
		case apierrors.IsNotFound(err) && m.createNamespace:
			if err := m.makeNamespace(ctx); err != nil {
				return true, err
			}
			return false, &NamespaceNotFoundError{Namespace: m.namespace, Err: err} // the next attempt creates the lease
		case apierrors.IsNotFound(err):
			return true, &NamespaceNotFoundError{Namespace: m.namespace, Err: err}
		default:
			return true, fmt.Errorf("creating lease %s: %w", key, err)
		}
	}

	holder := holderOf(lease)
	until, valid := validUntil(lease, now.Time)
	msg := "Renewed node lease"
	switch {
	case m.Holds(holder):
		if !valid {
			msg = "Reacquired expired node lease"
			lease.Spec.AcquireTime = &now
		}
	case valid && holder.Identity != "" && !takeOver(holder):
		return true, &AlreadyHeldError{Holder: holder.Identity, Namespace: holder.Namespace, Until: until}
	default:
		msg = "Took over expired node lease"
		if valid {
			msg = "Took over node lease from a holder acting for us"
		}
		logger = logger.WithValues("previousHolder", holder.String(), "until", until)
		transitions := int32(0)
		if lease.Spec.LeaseTransitions != nil {
			transitions = *lease.Spec.LeaseTransitions
		}
		lease.Spec.HolderIdentity = &m.holder
		lease.Spec.AcquireTime = &now
		lease.Spec.LeaseTransitions = new(transitions + 1)
	}
	lease.Spec.RenewTime = &now
	lease.Spec.LeaseDurationSeconds = &seconds
	setNodeOwner(lease, node)
	m.recordHolderNamespace(lease)
	if err := m.client.Update(ctx, lease); err != nil {
		if apierrors.IsConflict(err) {
			return false, err
		}
		return true, fmt.Errorf("updating lease %s: %w", key, err)
	}
	if !m.Holds(holder) {
		logger.Info(msg) // a hand-over between holders is worth telling
	} else {
		logger.V(4).Info(msg)
	}
	return true, nil
}

// makeNamespace creates the lease namespace (WithNamespaceCreation); one made meanwhile by someone else
// will do.
func (m *Manager) makeNamespace(ctx context.Context) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: m.namespace}}
	switch err := m.client.Create(ctx, ns); {
	case err == nil:
		log.FromContext(ctx).Info("Created the node lease namespace", "namespace", m.namespace)
	case !apierrors.IsAlreadyExists(err):
		return fmt.Errorf("creating the lease namespace %s: %w", m.namespace, err)
	}
	return nil
}

// InvalidateLease releases nodeName's lease if we hold it, by deleting it. A missing lease, or one held by
// someone else, is left alone and nil is returned.
func (m *Manager) InvalidateLease(ctx context.Context, nodeName string) error {
	key := client.ObjectKey{Namespace: m.namespace, Name: LeaseName(nodeName)}
	var lastErr error
	for attempt := range maxAttempts {
		lease := &coordinationv1.Lease{}
		if err := m.reader(attempt).Get(ctx, key, lease); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("getting lease %s: %w", key, err)
		}
		if !m.Holds(holderOf(lease)) {
			return nil
		}
		err := m.client.Delete(ctx, lease, client.Preconditions{UID: &lease.UID, ResourceVersion: &lease.ResourceVersion})
		switch {
		case err == nil, apierrors.IsNotFound(err):
			log.FromContext(ctx).V(4).Info("Released node lease", "node", nodeName, "holder", m.holder)
			return nil
		case apierrors.IsConflict(err):
			lastErr = err
		default:
			return fmt.Errorf("deleting lease %s: %w", key, err)
		}
	}
	return fmt.Errorf("releasing lease %s: gave up after %d attempts: %w", key, maxAttempts, lastErr)
}

// GetLease returns nodeName's lease. A missing lease is an error for which apierrors.IsNotFound is true.
func (m *Manager) GetLease(ctx context.Context, nodeName string) (*coordinationv1.Lease, error) {
	key := client.ObjectKey{Namespace: m.namespace, Name: LeaseName(nodeName)}
	lease := &coordinationv1.Lease{}
	if err := m.client.Get(ctx, key, lease); err != nil {
		return nil, fmt.Errorf("getting lease %s: %w", key, err)
	}
	return lease, nil
}

// HolderOf reports who holds nodeName's lease, whether the lease is still valid now, and until when. A
// missing lease yields no holder, false, zero time and no error.
func (m *Manager) HolderOf(ctx context.Context, nodeName string) (holder Holder, valid bool, until time.Time, err error) {
	lease, err := m.GetLease(ctx, nodeName)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return Holder{}, false, time.Time{}, nil
		}
		return Holder{}, false, time.Time{}, err
	}
	until, valid = validUntil(lease, m.clock.Now())
	return holderOf(lease), valid, until, nil
}

// Expiry is when a lease that RequestLease takes or renews at now for duration runs out: duration rounded
// up to whole seconds, from now as the API server stores it (to the microsecond). A lease read back after
// that write expires at Expiry or later.
func Expiry(now time.Time, duration time.Duration) time.Time {
	return now.Truncate(time.Microsecond).Add(time.Duration(durationSeconds(duration)) * time.Second)
}

// durationSeconds is a lease duration in the whole seconds a Lease holds, rounded up.
func durationSeconds(d time.Duration) int32 {
	return int32(min(math.Ceil(d.Seconds()), math.MaxInt32))
}

// ValidUntil returns when lease expires (renewTime, or acquireTime if it was never renewed, plus
// leaseDurationSeconds) and whether it is still valid at now. A lease is valid up to and including that
// instant. A lease without a duration or without either time is not valid, and its expiry is zero.
func ValidUntil(lease *coordinationv1.Lease, now time.Time) (until time.Time, valid bool) {
	return validUntil(lease, now)
}

func validUntil(lease *coordinationv1.Lease, now time.Time) (time.Time, bool) {
	base := lease.Spec.RenewTime
	if base == nil {
		base = lease.Spec.AcquireTime
	}
	if base == nil || lease.Spec.LeaseDurationSeconds == nil {
		return time.Time{}, false
	}
	until := base.Add(time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second)
	return until, !now.After(until)
}

// holderOf reads a lease's holder: its identity and the namespace recorded beside it.
func holderOf(lease *coordinationv1.Lease) Holder {
	h := Holder{Namespace: lease.Annotations[AnnotationHolderNamespace]}
	if lease.Spec.HolderIdentity != nil {
		h.Identity = *lease.Spec.HolderIdentity
	}
	return h
}

// recordHolderNamespace writes the Manager's holder namespace beside its identity on a lease it is about
// to write, or removes one left there by an earlier holder.
func (m *Manager) recordHolderNamespace(lease *coordinationv1.Lease) {
	if m.holderNamespace == "" {
		delete(lease.Annotations, AnnotationHolderNamespace)
		return
	}
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	lease.Annotations[AnnotationHolderNamespace] = m.holderNamespace
}

// setNodeOwner makes node the lease's only owner, as medik8s does.
func setNodeOwner(lease *coordinationv1.Lease, node *corev1.Node) {
	lease.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: corev1.SchemeGroupVersion.String(),
		Kind:       "Node",
		Name:       node.Name,
		UID:        node.UID,
	}}
}
