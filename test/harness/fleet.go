package harness

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/test/nodesim"
	"github.com/metalheal/metalheal/test/world"
)

// LeaseNamespace is where node maintenance leases live (medik8s' convention, the manager's default):
// StartWorkloadClusters creates it in every workload cluster, as an admin installing a remediator there
// would.
const LeaseNamespace = "medik8s-leases"

// Workload is one workload cluster of a fleet (see StartWorkloadClusters).
type Workload struct {
	// Name is the Cluster's name in the management cluster: a DNS label.
	Name string
	// Nodes name the cluster's worker Nodes. Names repeat across clusters, and may repeat the management
	// cluster's (worker-1): each is a host of its own, with a system of its own in the Redfish mock.
	Nodes []string
}

// FleetOptions describe the workload clusters StartWorkloadClusters starts.
type FleetOptions struct {
	// Namespace holds, in the management cluster, the Clusters and their kubeconfig Secrets, MachineSets
	// and Machines (created if missing; left in place by Stop).
	Namespace string
	// Clusters are the workload clusters, each with its own control plane.
	Clusters []Workload
	// MachineLabels are put on every Machine (the Cluster's name label is always set): what a
	// MachineHealthCheck's selector matches.
	MachineLabels map[string]string
	// NodeLabels are added to every workload Node (node-role.kubernetes.io/worker is always set).
	NodeLabels map[string]string
	// SkipClusterObjects describes each cluster by its kubeconfig Secret and its BMCs only: no Cluster,
	// MachineSet or Machines. For a management cluster where Cluster API's own controllers and webhooks
	// run: the caller creates the Cluster (with the infrastructure reference Cluster API's webhook
	// requires) and the Machines (an infrastructure machine reporting ProviderID(node)), and Cluster API
	// sets their nodeRefs. MachineLabels is then unused.
	SkipClusterObjects bool
	// World configures every workload cluster's control plane. Its name is the Cluster's; it serves no
	// metalheal or Cluster API kinds (SkipCRDs, ExtraCRDPaths are overridden); the node monitor timings
	// default to the management world's.
	World world.Options
}

// WorkloadCluster is a running workload cluster: its own etcd, kube-apiserver and
// kube-controller-manager (whose node lifecycle controller marks its silent Nodes Unknown), simulated
// kubelets whose hosts are systems of the harness's Redfish mock, and, in the management cluster, its
// Cluster, <cluster>-kubeconfig Secret, a MachineSet with one Machine per Node (providerID and nodeRef
// set; none of these with FleetOptions.SkipClusterObjects) and one BMC per host (spec.nodeName and
// spec.cluster).
type WorkloadCluster struct {
	// Name and Namespace are the Cluster's in the management cluster.
	Name, Namespace string
	// World is the cluster's control plane.
	World *world.World
	// Client is the cluster's administrator.
	Client client.Client
	// Sim runs the kubelets of the cluster's Nodes.
	Sim *nodesim.Simulator

	h      *Harness
	nodes  []string
	cancel context.CancelFunc

	stopOnce sync.Once
	stopErr  error
}

// dnsLabel is what a Cluster's name must be (it is also a system ID's prefix).
var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// StartWorkloadClusters starts workload clusters (their control planes at once) and describes them to
// the management cluster as Cluster API does, so that the manager's MachineHealthCheck reads their
// Nodes through the kubeconfig Secrets. Their hosts are added to the harness's Redfish mock (system
// ID "<cluster>.<node>", see WorkloadCluster.SystemID): one record holds every host's power. The
// management world must serve Cluster API's v1beta2 kinds (testenv.ClusterAPICRDs). The manager reads
// the Secrets only where RBAC lets it (see GrantClusterNamespace). Stop them with WorkloadCluster.Stop;
// Harness.Stop stops those left. On error nothing of them is left running.
func (h *Harness) StartWorkloadClusters(ctx context.Context, opts FleetOptions) (_ []*WorkloadCluster, err error) {
	if opts.Namespace == "" || len(opts.Clusters) == 0 {
		return nil, errors.New("a fleet needs a namespace and at least one cluster")
	}
	clusters := make([]*WorkloadCluster, len(opts.Clusters))
	var systems []string
	for i, w := range opts.Clusters {
		if !dnsLabel.MatchString(w.Name) || len(w.Nodes) == 0 {
			return nil, fmt.Errorf("workload cluster %q: want a DNS label and at least one node", w.Name)
		}
		c := &WorkloadCluster{Name: w.Name, Namespace: opts.Namespace, h: h, nodes: slices.Clone(w.Nodes)}
		for _, node := range c.nodes {
			systems = append(systems, c.SystemID(node))
		}
		clusters[i] = c
	}
	if err := h.Mock.AddSystems(systems...); err != nil {
		return nil, fmt.Errorf("adding the workload clusters' hosts to the Redfish mock: %w", err)
	}
	defer func() {
		if err != nil {
			for _, c := range clusters {
				_ = c.stopProcesses()
			}
		}
	}()

	h.logf("starting %d workload clusters", len(clusters))
	g, gctx := errgroup.WithContext(ctx)
	for _, c := range clusters {
		g.Go(func() error { return c.start(gctx, opts) })
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	if err := h.ensureNamespace(ctx, opts.Namespace); err != nil {
		return nil, err
	}
	if err := h.ensureBMCCredentials(ctx); err != nil {
		return nil, err
	}
	for _, c := range clusters {
		if err := c.describe(ctx, opts); err != nil {
			return nil, fmt.Errorf("describing workload cluster %s to the management cluster: %w", c.Name, err)
		}
	}
	h.mu.Lock()
	h.workloads = append(h.workloads, clusters...)
	h.mu.Unlock()
	return clusters, nil
}

// start starts the cluster's control plane and kubelets, and makes its lease namespace.
func (c *WorkloadCluster) start(ctx context.Context, opts FleetOptions) error {
	wo := opts.World
	wo.Name, wo.SkipCRDs, wo.ExtraCRDPaths = c.Name, true, nil
	if wo.NodeMonitorGracePeriod <= 0 {
		wo.NodeMonitorGracePeriod = c.h.World.NodeMonitorGracePeriod()
	}
	if wo.NodeMonitorPeriod <= 0 {
		wo.NodeMonitorPeriod = c.h.World.NodeMonitorPeriod()
	}
	var err error
	if c.World, err = world.Start(ctx, wo); err != nil {
		return fmt.Errorf("workload cluster %s: %w", c.Name, err)
	}
	if c.Client, err = client.New(c.World.RESTConfig(), client.Options{Scheme: Scheme()}); err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: LeaseNamespace}}
	if err := c.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("workload cluster %s: %w", c.Name, err)
	}

	systems := map[string]string{}
	for _, node := range c.nodes {
		systems[c.SystemID(node)] = node
	}
	power, err := nodesim.NewRedfishPower(c.h.Mock, systems)
	if err != nil {
		return err
	}
	cs, err := nodesim.NewClient(c.World.RESTConfig(), "nodesim-"+c.Name)
	if err != nil {
		return err
	}
	simCtx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	o := c.h.opts
	c.Sim = nodesim.New(cs, nodesim.Options{Name: "nodesim-" + c.Name, Power: power, LeaseInterval: o.LeaseInterval,
		BootDelay: o.BootDelay, OnBoot: o.OnBoot})
	if err := c.Sim.Start(simCtx); err != nil {
		return err
	}
	labels := map[string]string{"node-role.kubernetes.io/worker": ""}
	maps.Copy(labels, opts.NodeLabels)
	specs := make([]nodesim.NodeSpec, len(c.nodes))
	for i, node := range c.nodes {
		specs[i] = nodesim.NodeSpec{Name: node, Labels: labels, ProviderID: c.ProviderID(node)}
	}
	if err := c.Sim.AddNodes(ctx, specs...); err != nil {
		return fmt.Errorf("workload cluster %s: %w", c.Name, err)
	}
	return nil
}

// describe creates the cluster's objects in the management cluster: kubeconfig Secret first (the
// MachineHealthCheck remembers a missing one for a minute), then, unless opts.SkipClusterObjects, the
// Cluster, its MachineSet and the Machines (nodeRef in status), and the BMCs.
func (c *WorkloadCluster) describe(ctx context.Context, opts FleetOptions) error {
	mgmt := c.h.Client
	kubeconfig, err := os.ReadFile(c.World.Kubeconfig())
	if err != nil {
		return err
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: c.KubeconfigSecretName(),
			Labels: map[string]string{clusterv1.ClusterNameLabel: c.Name}},
		Type: clusterv1.ClusterSecretType,
		Data: map[string][]byte{"value": kubeconfig},
	}
	if err := mgmt.Create(ctx, secret); err != nil {
		return err
	}
	if !opts.SkipClusterObjects {
		if err := c.describeCluster(ctx, opts.MachineLabels); err != nil {
			return err
		}
	}
	for _, node := range c.nodes {
		b := &v1alpha1.BMC{
			ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: c.BMCName(node)},
			Spec: v1alpha1.BMCSpec{
				NodeName:             node,
				Cluster:              &v1alpha1.ClusterReference{Namespace: c.Namespace, Name: c.Name},
				Address:              c.h.bmcAddress(c.SystemID(node)),
				CredentialsSecretRef: v1alpha1.SecretReference{Name: bmcCredentials},
			},
		}
		if err := mgmt.Create(ctx, b); err != nil {
			return err
		}
	}
	return nil
}

// describeCluster creates the Cluster, its MachineSet and one Machine per Node, its nodeRef in status as
// Cluster API's Machine controller would set it.
func (c *WorkloadCluster) describeCluster(ctx context.Context, machineLabels map[string]string) error {
	mgmt := c.h.Client
	api, err := url.Parse(c.World.RESTConfig().Host)
	if err != nil {
		return err
	}
	port, err := strconv.Atoi(api.Port())
	if err != nil {
		return fmt.Errorf("the API server's port: %w", err)
	}
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: c.Name},
		Spec:       clusterv1.ClusterSpec{ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: api.Hostname(), Port: int32(port)}},
	}
	if err := mgmt.Create(ctx, cluster); err != nil {
		return err
	}
	labels := map[string]string{clusterv1.ClusterNameLabel: c.Name}
	maps.Copy(labels, machineLabels)
	set := &clusterv1.MachineSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: c.machineSetName()},
		Spec: clusterv1.MachineSetSpec{
			ClusterName: c.Name,
			Replicas:    ptr.To(int32(len(c.nodes))),
			Selector:    metav1.LabelSelector{MatchLabels: labels},
			Template: clusterv1.MachineTemplateSpec{
				ObjectMeta: clusterv1.ObjectMeta{Labels: labels},
				Spec:       c.machineSpec(c.machineSetName()),
			},
		},
	}
	if err := mgmt.Create(ctx, set); err != nil {
		return err
	}
	for _, node := range c.nodes {
		m := &clusterv1.Machine{
			ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: c.MachineName(node), Labels: labels,
				// A controller that replaces Machines: the MachineHealthCheck remediates only those.
				OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "MachineSet",
					Name: set.Name, UID: set.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
			Spec: c.machineSpec(c.MachineName(node)),
		}
		m.Spec.ProviderID = c.ProviderID(node)
		if err := mgmt.Create(ctx, m); err != nil {
			return err
		}
		m.Status.NodeRef = clusterv1.MachineNodeReference{Name: node}
		if err := mgmt.Status().Update(ctx, m); err != nil {
			return err
		}
	}
	return nil
}

// machineSpec is a Machine's spec in the cluster: no Cluster API controller runs, so nothing reads its
// bootstrap or infrastructure reference but the API server's validation.
func (c *WorkloadCluster) machineSpec(name string) clusterv1.MachineSpec {
	return clusterv1.MachineSpec{
		ClusterName: c.Name,
		Bootstrap:   clusterv1.Bootstrap{DataSecretName: ptr.To("bootstrap")},
		InfrastructureRef: clusterv1.ContractVersionedObjectReference{
			APIGroup: "infrastructure.cluster.x-k8s.io", Kind: "FakeMachine", Name: name},
	}
}

// Nodes lists the cluster's Nodes.
func (c *WorkloadCluster) Nodes() []string { return slices.Clone(c.nodes) }

// SystemID is the Redfish mock's system of a Node's host: "<cluster>.<node>" (a Cluster's name holds no
// dot, so no two hosts share one).
func (c *WorkloadCluster) SystemID(node string) string { return c.Name + "." + node }

// ProviderID is a Node's spec.providerID, and its Machine's.
func (c *WorkloadCluster) ProviderID(node string) string { return "nodesim://" + c.Name + "/" + node }

// MachineName is the name of a Node's Machine (in Namespace), "<cluster>-<node>": a MachineHealthCheck's
// remediation request is named after it.
func (c *WorkloadCluster) MachineName(node string) string { return c.Name + "-" + node }

// BMCName is the name of a host's BMC (in the manager's namespace), "<cluster>-<node>".
func (c *WorkloadCluster) BMCName(node string) string { return c.Name + "-" + node }

// KubeconfigSecretName is the Cluster's kubeconfig Secret, "<cluster>-kubeconfig" (in Namespace).
func (c *WorkloadCluster) KubeconfigSecretName() string { return c.Name + "-kubeconfig" }

// Host spells a Node's host as metalheal does: "<namespace>/<cluster>/<node>".
func (c *WorkloadCluster) Host(node string) string { return c.Namespace + "/" + c.Name + "/" + node }

func (c *WorkloadCluster) machineSetName() string { return c.Name + "-workers" }

// HostOfSystem names the host of a system of the Redfish mock: a management Node's name
// (WorkerPrefix-ID), or a workload cluster's host as WorkloadCluster.Host spells it.
func (h *Harness) HostOfSystem(id string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.workloads {
		if node, ok := strings.CutPrefix(id, c.Name+"."); ok && slices.Contains(c.nodes, node) {
			return c.Host(node)
		}
	}
	return WorkerPrefix + "-" + id
}

// Stop deletes the cluster's objects from the management cluster (BMCs, Machines, MachineSet, Cluster,
// kubeconfig Secret: remediation requests the Machines own go with them), then stops its kubelets and
// its control plane. Its hosts stay in the Redfish mock, powered as they are. It may be called more
// than once.
func (c *WorkloadCluster) Stop(ctx context.Context) error {
	c.stopOnce.Do(func() {
		c.stopErr = errors.Join(c.forget(ctx), c.stopProcesses())
	})
	return c.stopErr
}

// forget deletes the cluster's objects from the management cluster.
func (c *WorkloadCluster) forget(ctx context.Context) error {
	var objs []client.Object
	for _, node := range c.nodes {
		objs = append(objs,
			&v1alpha1.BMC{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: c.BMCName(node)}},
			&clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: c.MachineName(node)}})
	}
	objs = append(objs,
		&clusterv1.MachineSet{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: c.machineSetName()}},
		&clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: c.Name}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: c.KubeconfigSecretName()}})
	var errs []error
	for _, o := range objs {
		if err := c.h.Client.Delete(ctx, o); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("deleting %T %s: %w", o, o.GetName(), err))
		}
	}
	return errors.Join(errs...)
}

// stopProcesses stops the kubelets and the control plane.
func (c *WorkloadCluster) stopProcesses() error {
	if c.cancel != nil {
		c.cancel()
		<-c.Sim.Done()
	}
	if c.World != nil {
		return c.World.Stop()
	}
	return nil
}

// ensureNamespace creates a namespace of the management cluster unless it exists.
func (h *Harness) ensureNamespace(ctx context.Context, name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := h.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// GrantClusterNamespace grants the manager, in namespace of the management cluster, what
// config/cluster-api grants it in the namespace it names (the kubeconfig-readers component: get on the
// Clusters' kubeconfig Secrets, delete on Machines): the objects config/cluster-api renders beyond
// config/default, moved to namespace. The namespace is created if missing. The manager still acts on
// the namespace's remediation requests only if its --remediation-namespaces lists it.
func (h *Harness) GrantClusterNamespace(ctx context.Context, namespace string) error {
	base, err := render(ctx, "config/default")
	if err != nil {
		return err
	}
	withReaders, err := render(ctx, "config/cluster-api")
	if err != nil {
		return err
	}
	key := func(u *unstructured.Unstructured) string {
		return u.GetKind() + "/" + u.GetNamespace() + "/" + u.GetName()
	}
	inBase := map[string]bool{}
	for _, u := range base {
		inBase[key(u)] = true
	}
	var grants []*unstructured.Unstructured
	for _, u := range withReaders {
		if inBase[key(u)] {
			continue
		}
		if u.GetNamespace() == "" {
			return fmt.Errorf("config/cluster-api adds the cluster-scoped %s %s: GrantClusterNamespace knows only namespaced grants", u.GetKind(), u.GetName())
		}
		u.SetNamespace(namespace)
		grants = append(grants, u)
	}
	if len(grants) == 0 {
		return errors.New("config/cluster-api renders nothing beyond config/default")
	}
	if err := h.ensureNamespace(ctx, namespace); err != nil {
		return err
	}
	return h.apply(ctx, grants)
}
