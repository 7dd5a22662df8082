package nodesim

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// What a simulated kubelet reports about its machine.
const (
	osImage          = "metalheal nodesim"
	containerRuntime = "nodesim://1.0"
	kernelVersion    = "6.12.0-nodesim"
)

// boot is the kubelet starting: it registers its Node (creating it, or taking over the one that exists)
// with Ready=True and a new boot ID, then creates or renews its lease. It returns when the Node was
// stored Ready.
func (s *Simulator) boot(ctx context.Context, t task, now time.Time) (time.Time, error) {
	node := s.nodeObject(t, now)
	nodes := s.client.CoreV1().Nodes()
	var got *corev1.Node
	var err error
	if !t.registered {
		got, err = nodes.Create(ctx, node, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			got, err = s.patchStatus(ctx, t.node, node.Status)
		}
	} else {
		got, err = s.patchStatus(ctx, t.node, node.Status)
		if apierrors.IsNotFound(err) {
			got, err = nodes.Create(ctx, node, metav1.CreateOptions{})
		}
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("registering node %q: %w", t.node, err)
	}
	ready := s.clock.Now()
	return ready, s.ensureLease(ctx, got, t.leaseCreated, now)
}

// renewLease renews a node's lease, recreating it if it is gone.
func (s *Simulator) renewLease(ctx context.Context, t task, now time.Time) error {
	err := s.updateLease(ctx, t.node, now)
	if !apierrors.IsNotFound(err) {
		return err
	}
	node, err := s.client.CoreV1().Nodes().Get(ctx, t.node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return errNodeGone
	}
	if err != nil {
		return fmt.Errorf("reading node %q: %w", t.node, err)
	}
	return s.ensureLease(ctx, node, false, now)
}

// postStatus posts a heartbeat of the node's conditions.
func (s *Simulator) postStatus(ctx context.Context, t task, now time.Time) error {
	since := t.readySince
	if since.IsZero() {
		since = now
	}
	_, err := s.patch(ctx, t.node, map[string]any{"conditions": conditions(now, since)})
	if apierrors.IsNotFound(err) {
		return errNodeGone
	}
	return err
}

// patchStatus strategically merges status into the node's (conditions merge by type, as the kubelet's
// patches do).
func (s *Simulator) patchStatus(ctx context.Context, name string, status corev1.NodeStatus) (*corev1.Node, error) {
	return s.patch(ctx, name, status)
}

// patch strategically merges status, a corev1.NodeStatus or only some of its fields, into the node's. A
// heartbeat sends its conditions alone: a whole NodeStatus would also send its empty structs (the
// daemon endpoints' port 0, an empty node info), which JSON never omits, and wipe what registration set.
func (s *Simulator) patch(ctx context.Context, name string, status any) (*corev1.Node, error) {
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return nil, err
	}
	return s.client.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
}

// ensureLease renews the node's lease, or creates it (owned by the node, as the kubelet's is) when it does
// not exist. known says whether it is believed to exist.
func (s *Simulator) ensureLease(ctx context.Context, node *corev1.Node, known bool, now time.Time) error {
	if known {
		err := s.updateLease(ctx, node.Name, now)
		if !apierrors.IsNotFound(err) {
			return err
		}
	}
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name:      node.Name,
			Namespace: corev1.NamespaceNodeLease,
			Labels:    map[string]string{SimulatorLabel: s.opts.Name},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID,
			}},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(node.Name),
			LeaseDurationSeconds: ptr.To(int32(s.opts.LeaseDuration / time.Second)),
			RenewTime:            ptr.To(metav1.NewMicroTime(now)),
		},
	}
	created, err := s.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, lease, metav1.CreateOptions{})
	switch {
	case err == nil:
		s.leases.remember(created)
	case apierrors.IsAlreadyExists(err):
		err = s.updateLease(ctx, node.Name, now)
	}
	if err != nil {
		return fmt.Errorf("lease of node %q: %w", node.Name, err)
	}
	return nil
}

// updateLease sets the lease's holder and renew time, as the kubelet does: an update of the lease as it
// last wrote it (one request, no read, the same cost to the API server as a real kubelet's renewal), read
// again only when it has none or the update conflicts.
func (s *Simulator) updateLease(ctx context.Context, name string, now time.Time) error {
	leases := s.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	lease := s.leases.last(name)
	for attempt := 0; ; attempt++ {
		if lease == nil {
			got, err := leases.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			lease = got
		}
		lease.Spec.HolderIdentity = ptr.To(name)
		lease.Spec.RenewTime = ptr.To(metav1.NewMicroTime(now))
		updated, err := leases.Update(ctx, lease, metav1.UpdateOptions{})
		if err == nil {
			s.leases.remember(updated)
			return nil
		}
		s.leases.forget(name)
		if !apierrors.IsConflict(err) || attempt > 0 {
			return err
		}
		lease = nil // someone else wrote it: read it again, once
	}
}

// leaseMemory holds each node's lease as the simulator last wrote it. Entries are never changed: last
// hands out a copy to change and send.
type leaseMemory struct {
	mu     sync.Mutex
	leases map[string]*coordinationv1.Lease
}

func (m *leaseMemory) last(name string) *coordinationv1.Lease {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l := m.leases[name]; l != nil {
		return l.DeepCopy()
	}
	return nil
}

// remember keeps l, as the API server answered a write of it; the caller no longer uses it.
func (m *leaseMemory) remember(l *coordinationv1.Lease) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.leases == nil {
		m.leases = map[string]*coordinationv1.Lease{}
	}
	l.ManagedFields = nil // the API server keeps them when an update leaves them out
	m.leases[l.Name] = l
}

func (m *leaseMemory) forget(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.leases, name)
}

// nodeObject is the Node a kubelet registers: labels, capacity, addresses and a Ready status.
func (s *Simulator) nodeObject(t task, now time.Time) *corev1.Node {
	spec := t.spec
	labels := map[string]string{
		corev1.LabelHostname:   spec.Name,
		corev1.LabelOSStable:   "linux",
		corev1.LabelArchStable: "amd64",
		SimulatorLabel:         s.opts.Name,
	}
	maps.Copy(labels, spec.Labels)
	annotations := map[string]string{
		"node.alpha.kubernetes.io/ttl":                           "0",
		"volumes.kubernetes.io/controller-managed-attach-detach": "true",
	}
	maps.Copy(annotations, spec.Annotations)
	capacity := spec.Capacity
	if capacity == nil {
		capacity = defaultCapacity()
	}
	addresses := spec.Addresses
	port := s.ports.port(spec.Name) // 0 unless Options.KubeletPorts
	if addresses == nil {
		ip := hostIP(t.index)
		if port != 0 {
			ip = KubeletAddress
		}
		addresses = []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: ip},
			{Type: corev1.NodeHostName, Address: spec.Name},
		}
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: spec.Name, Labels: labels, Annotations: annotations},
		Spec:       corev1.NodeSpec{Taints: spec.Taints, ProviderID: spec.ProviderID},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: capacity,
			Addresses:   addresses,
			Conditions:  conditions(now, now),
			DaemonEndpoints: corev1.NodeDaemonEndpoints{
				KubeletEndpoint: corev1.DaemonEndpoint{Port: port},
			},
			NodeInfo: corev1.NodeSystemInfo{
				MachineID:               spec.Name,
				SystemUUID:              spec.Name,
				BootID:                  t.bootID,
				KernelVersion:           kernelVersion,
				OSImage:                 osImage,
				ContainerRuntimeVersion: containerRuntime,
				KubeletVersion:          s.opts.KubeletVersion,
				OperatingSystem:         "linux",
				Architecture:            "amd64",
			},
		},
	}
}

// conditions are a healthy kubelet's node conditions, heartbeating at now, Ready since since.
func conditions(now, since time.Time) []corev1.NodeCondition {
	hb, tr := metav1.NewTime(now), metav1.NewTime(since)
	c := func(typ corev1.NodeConditionType, status corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: typ, Status: status, Reason: reason, Message: msg, LastHeartbeatTime: hb, LastTransitionTime: tr}
	}
	return []corev1.NodeCondition{
		c(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
		c(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
		c(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
		c(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"),
	}
}

// hostIP is the InternalIP of the index-th host: 172.16.0.1, 172.16.0.2, ... (up to about a million).
func hostIP(index int) string {
	return fmt.Sprintf("172.%d.%d.%d", 16+(index>>16)&15, (index>>8)&255, index&255)
}

// slimNode is the node informer's transform: the simulator needs only the name and the Ready condition.
func slimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	slim := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion,
	}}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			slim.Status.Conditions = []corev1.NodeCondition{{Type: c.Type, Status: c.Status}}
		}
	}
	return slim, nil
}

// onNode repairs a live node that the API server shows as not Ready: a kubelet posts its status again
// when the node it reads back differs from what it is.
func (s *Simulator) onNode(obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			return
		}
	}
	now := s.clock.Now()
	s.mu.Lock()
	repaired := s.fleet.repair(n.Name, now)
	s.mu.Unlock()
	if repaired {
		s.poke()
	}
}
