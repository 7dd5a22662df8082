package mhc

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/engine"
	"github.com/metalheal/metalheal/internal/template"
	"github.com/metalheal/metalheal/internal/workload"
)

// nodeGetLimit: up to this many Nodes are read one by one; more are read with one List of the cache.
const nodeGetLimit = 32

// observe reads what planChecks decides from, all from the cache except a workload cluster's kubeconfig
// Secret the first time the cluster is connected.
func (r *Reconciler) observe(ctx context.Context, mhc *v1alpha1.MachineHealthCheck, now time.Time) (planInput, error) {
	in := planInput{Check: mhc, Spec: checkSpecFor(mhc), Now: now}
	steps, err := stepsFor(mhc)
	if err != nil {
		return in, err
	}
	in.Steps = steps
	var kinds, templates []schema.GroupVersionKind
	for _, s := range steps {
		if !slices.Contains(kinds, s.GVK) {
			kinds = append(kinds, s.GVK)
		}
		if tpl := s.GVK.GroupVersion().WithKind(s.Ref().Kind); !slices.Contains(templates, tpl) {
			templates = append(templates, tpl)
		}
	}
	// Before anything of them is watched: a kind the check names is watched cluster-wide by the manager
	// every check shares.
	if err := template.CheckRemediationKinds(kinds); err != nil {
		return in, err
	}
	recorded, err := r.recordedKinds(mhc, kinds)
	if err != nil {
		return in, err
	}
	kinds = append(kinds, recorded...)
	sel, err := metav1.LabelSelectorAsSelector(&mhc.Spec.Selector)
	if err != nil {
		return in, &InvalidSpecError{Field: "selector", Reason: err.Error()}
	}
	if sel.Empty() {
		return in, &InvalidSpecError{Field: "selector", Reason: "an empty selector would select every Machine"}
	}
	if _, ok := mhc.Annotations[clusterv1.PausedAnnotation]; ok {
		in.Paused = "The MachineHealthCheck has the " + clusterv1.PausedAnnotation + " annotation"
	}

	version, err := r.served.get()
	if err != nil {
		return in, err
	}
	if version == "" {
		// Nothing can be watched for the check now: let go of what it watched (Cluster API may have been
		// removed), so that no failing informer is retried for it.
		r.forgetKinds(ctx, client.ObjectKeyFromObject(mhc))
		r.dropIndexUnless("")
		return in, &clusterAPINotInstalledError{retry: r.clock.Now().Add(r.opts.ClusterAPIRecheckInterval)}
	}
	if err := r.watchKinds(ctx, mhc, version, kinds, templates); err != nil {
		return in, err
	}
	// Every template is read and checked before anything is decided, as a NodeHealthCheck's: a template
	// missing or unusable disables the check at once, not when a Machine fails (planChecks).
	resolve := engine.Templates{Mapper: r.client.RESTMapper(), Reader: engine.Guarded{Reader: r.reader}, KindRetry: kindRetry}
	for i := range in.Steps {
		tpl, _, c, retry, err := resolve.Resolve(ctx, in.Steps[i].Ref(), nil, now)
		if err != nil {
			return in, err
		}
		if c != nil && in.Disabled == nil {
			in.Disabled = c
			if retry > 0 {
				in.DisabledUntil = now.Add(retry)
			}
		}
		in.Steps[i].Object = tpl
	}

	nodes := r.reader
	if mhc.Spec.ClusterName != "" {
		key := clusterKey(mhc)
		cluster, err := getCluster(ctx, r.reader, version, key)
		switch {
		case apierrors.IsNotFound(err):
			r.remotes.Forget(key)
		case err != nil:
			return in, fmt.Errorf("reading Cluster %s: %w", key, err)
		default:
			in.Cluster = cluster
		}
		switch {
		case in.Cluster == nil:
		case !cluster.DeletionTimestamp.IsZero():
			r.remotes.Forget(key)
			in.Paused = fmt.Sprintf("Cluster %s is being deleted", key.Name)
		default:
			if cluster.Spec.Paused != nil && *cluster.Spec.Paused && in.Paused == "" {
				in.Paused = fmt.Sprintf("Cluster %s is paused", key.Name)
			}
			if ns := r.opts.ClusterNamespaces; len(ns) > 0 && !slices.Contains(ns, key.Namespace) {
				return in, &workload.ForbiddenError{Cluster: key, NotListed: true, Retry: r.clock.Now().Add(r.opts.KubeconfigRecheckInterval)}
			}
			remote, isRemote, err := r.remotes.Get(ctx, r.apiReader, key)
			if err != nil {
				return in, err
			}
			if isRemote {
				nodes = remote.Nodes()
				in.Safety.Site = nodeSite{Key: key, Remote: remote}
			}
		}
	}

	machines, err := listMachines(ctx, r.reader, version, mhc.Namespace, sel)
	if err != nil {
		return in, fmt.Errorf("listing Machines (%s): %w", version, err)
	}
	names := make(map[string]bool, len(machines))
	var nodeNames []string
	for _, m := range machines {
		if mhc.Spec.ClusterName != "" && m.Spec.ClusterName != mhc.Spec.ClusterName {
			continue
		}
		names[m.Name] = true
		if n := m.Status.NodeRef.Name; n != "" {
			nodeNames = append(nodeNames, n)
		}
		in.Machines = append(in.Machines, observedTarget{Machine: m})
	}
	byName, err := readNodes(ctx, nodes, nodeNames)
	if err != nil {
		return in, err
	}
	requests, orphans, err := r.readRequests(ctx, mhc, version, kinds, names)
	if err != nil {
		return in, err
	}
	in.Orphans = orphans
	for i := range in.Machines {
		t := &in.Machines[i]
		if n := t.Machine.Status.NodeRef.Name; n != "" {
			t.Node = byName[n]
			t.NodeMissing = t.Node == nil
		}
		t.Requests = requests[t.Machine.Name]
	}
	slices.SortFunc(in.Machines, func(a, b observedTarget) int { return strings.Compare(a.Machine.Name, b.Machine.Name) })
	return in, nil
}

// recordedKinds are the installed request kinds the check's status records requests of that no step
// names (named): the spec changed while a step ran. They are watched and read as the steps' kinds are, as
// a NodeHealthCheck's are, so that the request of the old kind is still seen: marked timed out, its hand-
// over waited for before the new step starts, its Node's lease kept while it lives, and deleted once the
// Machine is healthy. A kind never watched (template.CheckRemediationKind) or no longer installed is left
// out: nothing of it can be read.
func (r *Reconciler) recordedKinds(mhc *v1alpha1.MachineHealthCheck, named []schema.GroupVersionKind) ([]schema.GroupVersionKind, error) {
	var out []schema.GroupVersionKind
	for _, um := range mhc.Status.UnhealthyMachines {
		for _, rec := range um.Remediations {
			gv, err := schema.ParseGroupVersion(rec.APIVersion)
			if err != nil || rec.APIVersion == "" {
				continue // an older record, of a step's kind
			}
			gvk := gv.WithKind(rec.Kind)
			if slices.Contains(named, gvk) || slices.Contains(out, gvk) || template.CheckRemediationKind(gvk) != nil {
				continue
			}
			if _, err := r.client.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version); meta.IsNoMatchError(err) {
				continue
			} else if err != nil {
				return nil, fmt.Errorf("mapping %s: %w", gvk, err)
			}
			out = append(out, gvk)
		}
	}
	return out, nil
}

// kindRetry is how soon a check whose template kind is not installed looks again: no watch reports a CRD
// installed (the NodeHealthCheck's default KindRetryPeriod).
const kindRetry = time.Minute

// readNodes reads the named Nodes; absent ones are missing from the map.
func readNodes(ctx context.Context, reader client.Reader, names []string) (map[string]*corev1.Node, error) {
	out := make(map[string]*corev1.Node, len(names))
	if len(names) <= nodeGetLimit {
		for _, name := range names {
			n := &corev1.Node{}
			if err := reader.Get(ctx, types.NamespacedName{Name: name}, n); err != nil {
				if apierrors.IsNotFound(err) {
					continue
				}
				return nil, fmt.Errorf("reading Node %s: %w", name, err)
			}
			out[name] = n
		}
		return out, nil
	}
	var list corev1.NodeList
	if err := reader.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing Nodes: %w", err)
	}
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = true
	}
	for i := range list.Items {
		if want[list.Items[i].Name] {
			out[list.Items[i].Name] = &list.Items[i]
		}
	}
	return out, nil
}

// readRequests returns, by Machine name, the remediation requests this check owns for the given
// Machines, and the requests it owns whose Machine no longer exists (orphans: its owner reference to this
// check keeps them from the garbage collector, so the check must delete them itself). Only kinds whose
// watch has synced are read (see watchKinds), so no read waits for an informer.
func (r *Reconciler) readRequests(ctx context.Context, mhc *v1alpha1.MachineHealthCheck, version string, kinds []schema.GroupVersionKind, machines map[string]bool) (map[string][]engine.Request, []orphan, error) {
	out := map[string][]engine.Request{}
	var orphans []orphan
	now := r.clock.Now()
	for _, gvk := range kinds {
		// Bounded all the same: a cache read of a kind without a synced informer would wait for one for ever.
		items, err := engine.ListRequests(ctx, engine.Guarded{Reader: r.reader}, r.client.Scheme(), gvk, mhc.Namespace)
		if err != nil {
			return nil, nil, err
		}
		for _, item := range items {
			if !engine.OwnedBy(item, mhc.UID) {
				continue
			}
			ref, machine := engine.RefIn(gvk, item), machineOf(item)
			q := engine.RequestOf(ref, item)
			q.Deleting = q.Deleting || r.recent.Seen(ref, now) // deleted a moment ago: the cache does not show it yet
			switch {
			case machines[machine]:
				out[machine] = append(out[machine], q)
			case !q.Deleting:
				gone, err := r.machineGone(ctx, version, types.NamespacedName{Namespace: mhc.Namespace, Name: machine})
				if err != nil {
					return nil, nil, err
				}
				if gone {
					orphans = append(orphans, orphan{Ref: ref, UID: item.GetUID(), Node: item.GetAnnotations()[template.AnnotationNodeName]})
				}
			}
		}
	}
	r.recent.AddCreated(mhc.UID, out, now) // created a moment ago: the cache does not show them yet
	return out, orphans, nil
}

// orphan is a request the check owns whose Machine no longer exists.
type orphan struct {
	Ref engine.Ref
	UID types.UID
	// Node is the Node the request names (template.AnnotationNodeName), "" when it names none.
	Node string
}

// machineOf is the name of the Machine a request remediates: its owner, which the request is named after,
// unless it is a later escalation step's whose name would collide with an earlier one's.
func machineOf(obj client.Object) string {
	for _, ref := range obj.GetOwnerReferences() {
		if gv, err := schema.ParseGroupVersion(ref.APIVersion); err == nil && gv.Group == clusterv1.GroupVersion.Group && ref.Kind == "Machine" {
			return ref.Name
		}
	}
	return obj.GetName()
}

// machineGone reports whether a Machine no longer exists.
func (r *Reconciler) machineGone(ctx context.Context, version string, key types.NamespacedName) (bool, error) {
	err := r.reader.Get(ctx, key, emptyMachine(version))
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading Machine %s: %w", key, err)
	}
	return false, nil
}
