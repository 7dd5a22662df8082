package powerwatch

import (
	"context"
	"encoding/json"
	"fmt"
	"net"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/bmcaccess"
)

// nodes is where a host's Node is read and its status written: the manager's own cluster, or the
// Cluster API workload cluster the BMC's spec.cluster names.
type nodes struct {
	reader client.Reader
	writer client.Client
}

// nodesOf returns the cluster of b's Node. A BMC naming a Cluster whose kubeconfig Secret does not exist
// has its Node here, as the remediator reads it (internal/workload).
func (w *Watcher) nodesOf(ctx context.Context, b *v1alpha1.BMC) (nodes, error) {
	local := nodes{reader: w.opts.Client, writer: w.opts.Client}
	host := bmcaccess.HostOf(b)
	if host.Cluster.Name == "" || w.opts.WorkloadClusters == nil {
		return local, nil
	}
	c, remote, err := w.opts.WorkloadClusters.Get(ctx, w.opts.APIReader, host.Cluster)
	switch {
	case err != nil:
		return nodes{}, err
	case !remote:
		return local, nil
	}
	return nodes{reader: c.Nodes(), writer: c.Client()}, nil
}

// node reads the host's Node; nil when it does not exist.
func (n nodes) node(ctx context.Context, name string) (*corev1.Node, error) {
	node := &corev1.Node{}
	if err := n.reader.Get(ctx, types.NamespacedName{Name: name}, node); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return node, nil
}

// setCondition writes cond into the Node's status, and nothing else: a strategic merge patch of
// status.conditions merges by type, so the kubelet's own conditions stay as they are (node-problem-detector
// writes its conditions the same way). It needs patch on nodes/status, not on nodes.
func (n nodes) setCondition(ctx context.Context, name string, cond corev1.NodeCondition) error {
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{cond}}})
	if err != nil {
		return err
	}
	node := &corev1.Node{}
	node.Name = name
	if err := n.writer.Status().Patch(ctx, node, client.RawPatch(types.StrategicMergePatchType, patch)); err != nil {
		return fmt.Errorf("setting condition %s=%s on Node %s: %w", cond.Type, cond.Status, name, err)
	}
	return nil
}

// dialKubelet is the default probe: a TCP connection to the kubelet, closed at once. It sends nothing: an
// answer of the host's network stack on the kubelet's port is the reading.
func dialKubelet(ctx context.Context, endpoint string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", endpoint)
	if err != nil {
		return err
	}
	return conn.Close()
}
