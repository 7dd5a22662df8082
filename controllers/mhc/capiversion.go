package mhc

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	clusterv1beta1 "sigs.k8s.io/cluster-api/api/core/v1beta1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	v1alpha1 "github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/engine"
)

// The controller reads Machines and Clusters in the version the API server serves: v1beta2 (Cluster API
// v1.11 and later, which serve v1beta1 too for a while) or v1beta1 (every release before). Inside, a
// Machine is always a v1beta2 object; a v1beta1 one is converted with Cluster API's own conversion and
// carries its served apiVersion in its TypeMeta, so that the requests made for it (their owner reference)
// and the events about it name the version the cluster serves. The fields read exist in both versions
// (labels, owner references, spec.clusterName, status.nodeRef.name, conditions), at different places:
//
//	             v1beta1                                   v1beta2
//	nodeRef      status.nodeRef (ObjectReference)          status.nodeRef (MachineNodeReference: name)
//	conditions   status.conditions (Cluster API's own      status.conditions (metav1.Condition)
//	             type, with severity) and, since v1.9,
//	             status.v1beta2.conditions (metav1)
//	failure      status.failureReason/failureMessage       status.deprecated.v1beta1.failure*
//	paused       spec.paused (bool)                        spec.paused (*bool)

// DefaultClusterAPIRecheckInterval is how long the served Cluster API version is remembered before
// discovery is asked again: the longest a Cluster API installed or upgraded after the manager started goes
// unnoticed.
const DefaultClusterAPIRecheckInterval = 30 * time.Second

// clusterAPIVersions are the versions the controller can read, preferred first.
var clusterAPIVersions = []string{clusterv1.GroupVersion.Version, clusterv1beta1.GroupVersion.Version}

// Discovery is what the controller needs of a discovery client (discovery.DiscoveryInterface is one).
type Discovery interface {
	ServerResourcesForGroupVersion(groupVersion string) (*metav1.APIResourceList, error)
}

// servedVersion remembers which Cluster API version the API server serves, asking discovery at most every
// recheck. Two discovery calls at most: they are cheap and need no RBAC.
type servedVersion struct {
	disco   Discovery
	clock   clock.Clock
	recheck time.Duration

	mu      sync.Mutex
	version string
	until   time.Time
}

// get returns the served version ("v1beta2" or "v1beta1"), or "" when no version the controller reads
// serves both Machines and Clusters.
func (s *servedVersion) get() (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	if now.Before(s.until) {
		return s.version, nil
	}
	found := ""
	for _, v := range clusterAPIVersions {
		gv := clusterv1.GroupVersion.Group + "/" + v
		list, err := s.disco.ServerResourcesForGroupVersion(gv)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("discovering %s: %w", gv, err)
		}
		if servesResources(list, "machines", "clusters") {
			found = v
			break
		}
	}
	s.version, s.until = found, now.Add(s.recheck)
	recordServedVersion(found)
	return found, nil
}

// forget makes the next get ask discovery again (a watch of the remembered version failed: Cluster API
// may have been upgraded or removed).
func (s *servedVersion) forget() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.until = time.Time{}
}

func servesResources(list *metav1.APIResourceList, names ...string) bool {
	for _, n := range names {
		if !slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == n }) {
			return false
		}
	}
	return true
}

// clusterAPINotInstalledError says that the API server serves no Cluster API version the controller reads.
type clusterAPINotInstalledError struct {
	retry time.Time
}

func (e *clusterAPINotInstalledError) Error() string {
	return fmt.Sprintf("Cluster API is not installed: the API server serves no Machines and Clusters of %s in version %s",
		clusterv1.GroupVersion.Group, joinVersions())
}

func joinVersions() string {
	out := ""
	for i, v := range clusterAPIVersions {
		if i > 0 {
			out += " or "
		}
		out += v
	}
	return out
}

// emptyMachine and emptyCluster are the typed objects of the served version, for watches and reads.
func emptyMachine(version string) client.Object {
	if version == clusterv1beta1.GroupVersion.Version {
		return &clusterv1beta1.Machine{}
	}
	return &clusterv1.Machine{}
}

func emptyCluster(version string) client.Object {
	if version == clusterv1beta1.GroupVersion.Version {
		return &clusterv1beta1.Cluster{}
	}
	return &clusterv1.Cluster{}
}

// listMachines lists the Machines of a namespace that sel selects, as v1beta2 objects.
func listMachines(ctx context.Context, reader client.Reader, version, namespace string, sel labels.Selector) ([]*clusterv1.Machine, error) {
	opts := []client.ListOption{client.InNamespace(namespace), client.MatchingLabelsSelector{Selector: sel}, client.UnsafeDisableDeepCopy}
	if version == clusterv1beta1.GroupVersion.Version {
		var list clusterv1beta1.MachineList
		if err := reader.List(ctx, &list, opts...); err != nil {
			return nil, err
		}
		out := make([]*clusterv1.Machine, 0, len(list.Items))
		for i := range list.Items {
			m, err := machineFromV1beta1(&list.Items[i])
			if err != nil {
				return nil, err
			}
			out = append(out, m)
		}
		return out, nil
	}
	var list clusterv1.MachineList
	if err := reader.List(ctx, &list, opts...); err != nil {
		return nil, err
	}
	out := make([]*clusterv1.Machine, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, &list.Items[i])
	}
	return out, nil
}

// getMachine reads a Machine, in the served version, as a v1beta2 object.
func getMachine(ctx context.Context, reader client.Reader, version string, key types.NamespacedName) (*clusterv1.Machine, error) {
	if version == clusterv1beta1.GroupVersion.Version {
		in := &clusterv1beta1.Machine{}
		if err := reader.Get(ctx, key, in); err != nil {
			return nil, err
		}
		return machineFromV1beta1(in)
	}
	m := &clusterv1.Machine{}
	if err := reader.Get(ctx, key, m); err != nil {
		return nil, err
	}
	return m, nil
}

// machineFromV1beta1 converts a v1beta1 Machine; the result names v1beta1 as its apiVersion.
func machineFromV1beta1(in *clusterv1beta1.Machine) (*clusterv1.Machine, error) {
	out := &clusterv1.Machine{}
	if err := clusterv1beta1.Convert_v1beta1_Machine_To_v1beta2_Machine(in, out, nil); err != nil {
		return nil, fmt.Errorf("converting Machine %s from v1beta1: %w", in.Name, err)
	}
	out.APIVersion, out.Kind = clusterv1beta1.GroupVersion.String(), "Machine"
	return out, nil
}

// getCluster reads a Cluster as a v1beta2 object.
func getCluster(ctx context.Context, reader client.Reader, version string, key types.NamespacedName) (*clusterv1.Cluster, error) {
	if version == clusterv1beta1.GroupVersion.Version {
		in := &clusterv1beta1.Cluster{}
		if err := reader.Get(ctx, key, in); err != nil {
			return nil, err
		}
		out := &clusterv1.Cluster{}
		if err := clusterv1beta1.Convert_v1beta1_Cluster_To_v1beta2_Cluster(in, out, nil); err != nil {
			return nil, fmt.Errorf("converting Cluster %s from v1beta1: %w", key, err)
		}
		out.APIVersion, out.Kind = clusterv1beta1.GroupVersion.String(), "Cluster"
		return out, nil
	}
	c := &clusterv1.Cluster{}
	if err := reader.Get(ctx, key, c); err != nil {
		return nil, err
	}
	return c, nil
}

// machineAPIVersion is the apiVersion a Machine was read in: its TypeMeta's for a converted one, v1beta2
// otherwise.
func machineAPIVersion(m *clusterv1.Machine) string {
	if m.APIVersion != "" {
		return m.APIVersion
	}
	return clusterv1.GroupVersion.String()
}

// writeMachineConditions writes a Machine's new conditions in the shape of the version it was read in,
// failing on a conflict rather than overwriting conditions another controller set meanwhile. A v1beta1
// Machine gets them twice, as Cluster API v1.9 and v1.10 write them: in status.v1beta2.conditions
// (metav1.Condition) and, for HealthCheckSucceeded and OwnerRemediated (what its MachineSet and
// KubeadmControlPlane act on), in status.conditions in the v1beta1 shape, with a severity.
func (r *Reconciler) writeMachineConditions(ctx context.Context, m *clusterv1.Machine, conds []metav1.Condition) error {
	if machineAPIVersion(m) != clusterv1beta1.GroupVersion.String() {
		updated := m.DeepCopy()
		updated.Status.Conditions = conds
		return r.client.Status().Patch(ctx, updated, client.MergeFromWithOptions(m, client.MergeFromWithOptimisticLock{}))
	}
	old := &clusterv1beta1.Machine{}
	if err := clusterv1beta1.Convert_v1beta2_Machine_To_v1beta1_Machine(m, old, nil); err != nil {
		return fmt.Errorf("converting Machine %s to v1beta1: %w", m.Name, err)
	}
	old.TypeMeta = metav1.TypeMeta{}
	updated := old.DeepCopy()
	if updated.Status.V1Beta2 == nil {
		updated.Status.V1Beta2 = &clusterv1beta1.MachineV1Beta2Status{}
	}
	updated.Status.V1Beta2.Conditions = conds
	for _, t := range []string{clusterv1.MachineHealthCheckSucceededCondition, clusterv1.MachineOwnerRemediatedCondition} {
		if c := meta.FindStatusCondition(conds, t); c != nil {
			setV1beta1Condition(&updated.Status.Conditions, v1beta1Condition(c))
		}
	}
	return r.client.Status().Patch(ctx, updated, client.MergeFromWithOptions(old, client.MergeFromWithOptimisticLock{}))
}

// v1beta1Reasons maps the v1beta2 reasons of HealthCheckSucceeded to Cluster API v1.10's.
var v1beta1Reasons = map[string]string{
	clusterv1.MachineHealthCheckNodeDeletedReason:            clusterv1beta1.NodeNotFoundReason,
	clusterv1.MachineHealthCheckHasRemediateAnnotationReason: clusterv1beta1.HasRemediateMachineAnnotationReason,
	clusterv1.MachineHealthCheckUnhealthyMachineReason:       clusterv1beta1.MachineHasFailureReason,
	clusterv1.MachineHealthCheckSucceededReason:              "",
}

// v1beta1Condition is a condition as Cluster API v1.10 writes it: True without a reason, False with
// severity Warning.
func v1beta1Condition(c *metav1.Condition) clusterv1beta1.Condition {
	out := clusterv1beta1.Condition{Type: clusterv1beta1.ConditionType(c.Type), Status: corev1.ConditionStatus(c.Status),
		LastTransitionTime: c.LastTransitionTime, Reason: c.Reason, Message: c.Message}
	if r, ok := v1beta1Reasons[c.Reason]; ok {
		out.Reason = r
	}
	if c.Status == metav1.ConditionFalse {
		out.Severity = clusterv1beta1.ConditionSeverityWarning
	}
	return out
}

// setV1beta1Condition sets c in conds, keeping the transition time when the status did not change.
func setV1beta1Condition(conds *clusterv1beta1.Conditions, c clusterv1beta1.Condition) {
	for i := range *conds {
		old := &(*conds)[i]
		if old.Type != c.Type {
			continue
		}
		if old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
		}
		*old = c
		return
	}
	*conds = append(*conds, c)
}

// disableFor sets Disabled=True with reason and message (the rest of the status is kept: nothing was
// observed), emits a Warning event when the check becomes disabled or for another reason (engine.Disable),
// and looks again at retry.
func (r *Reconciler) disableFor(ctx context.Context, mhc *v1alpha1.MachineHealthCheck, reason, message string, retry time.Time) (ctrl.Result, error) {
	now := r.clock.Now()
	status := *mhc.Status.DeepCopy()
	news := engine.Disable(&status.Conditions, mhc.Generation, reason, message, now)
	if err := r.patchStatus(ctx, mhc, status); err != nil {
		return ctrl.Result{}, err
	}
	if news {
		r.recorder.Eventf(mhc, nil, corev1.EventTypeWarning, EventDisabled, actionCheck, "No remediation can start: %s", message)
	}
	r.cpClaim.Looked(claimKey(mhc), r.clock.Now()) // it has looked: it can keep no lease until it works again
	r.cpClaim.Forget(claimKey(mhc))                // nor tell of its Machines: the leases are the record again
	return ctrl.Result{RequeueAfter: requeueAfter(retry, now)}, nil
}

// versionPoller asks discovery for the served Cluster API version every recheck interval and, when it
// changed (Cluster API installed, upgraded to a new version, or removed), enqueues every check: a check
// with nothing else to do would otherwise go on reading the old version, or keep saying that Cluster API
// is absent, until its next event.
type versionPoller struct {
	r      *Reconciler
	events chan event.TypedGenericEvent[client.Object]
}

// Start implements manager.Runnable.
func (p *versionPoller) Start(ctx context.Context) error {
	last, _ := p.r.served.get()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-p.r.clock.After(p.r.opts.ClusterAPIRecheckInterval):
		}
		version, err := p.r.served.get()
		if err != nil || version == last {
			continue
		}
		ctrl.LoggerFrom(ctx).Info("Served Cluster API version changed", "from", last, "to", version)
		last = version
		var checks v1alpha1.MachineHealthCheckList
		if err := p.r.reader.List(ctx, &checks); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Listing MachineHealthChecks after a Cluster API version change")
			continue
		}
		for i := range checks.Items {
			select {
			case p.events <- event.TypedGenericEvent[client.Object]{Object: &checks.Items[i]}:
			case <-ctx.Done():
				return nil
			}
		}
	}
}
