package nodesim

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
)

// Defaults of Options: a kubelet's.
const (
	// DefaultLeaseInterval is how often a node's lease is renewed (the kubelet's default).
	DefaultLeaseInterval = 10 * time.Second
	// DefaultLeaseDuration is the lease's spec.leaseDurationSeconds (the kubelet's default).
	DefaultLeaseDuration = 40 * time.Second
	// DefaultStatusInterval is how often a node posts a status that has not changed
	// (the kubelet's nodeStatusReportFrequency).
	DefaultStatusInterval = 5 * time.Minute
	// DefaultBootDelay is how long after power-on the kubelet is up and posts Ready=True.
	DefaultBootDelay = 10 * time.Second
	// DefaultRetryInterval is how soon a failed API call is tried again.
	DefaultRetryInterval = time.Second
	// DefaultWorkers is how many API calls are made at once for heartbeats, and as many for boots.
	DefaultWorkers = 16
	// DefaultName names the simulator in labels and its user agent.
	DefaultName = "nodesim"
)

// Labels and annotations the simulator puts on what it creates.
const (
	// SimulatorLabel is on every Node and Lease a simulator creates; its value is Options.Name.
	SimulatorLabel = "nodesim.metalheal.io/simulator"
)

// Options configure a Simulator. The zero value simulates kubelets with their default timings, every
// host powered on.
type Options struct {
	// Name tells this simulator's objects (label SimulatorLabel) from another's. Default DefaultName.
	Name string
	// Clock drives every timer. Default: the real clock.
	Clock clock.WithTicker
	// Power tells the simulator whether hosts have power. Default: every host is always on (SetPower can
	// still change that).
	Power PowerSource

	// LeaseInterval: see DefaultLeaseInterval. Keep it a third of the node monitor grace period or less.
	LeaseInterval time.Duration
	// LeaseDuration: see DefaultLeaseDuration.
	LeaseDuration time.Duration
	// StatusInterval: see DefaultStatusInterval.
	StatusInterval time.Duration
	// BootDelay: see DefaultBootDelay. A negative value boots at once.
	BootDelay time.Duration
	// RetryInterval: see DefaultRetryInterval.
	RetryInterval time.Duration
	// Workers: see DefaultWorkers.
	Workers int
	// OnBoot, if set, is called when a host has booted (its Node registered Ready and its lease renewed),
	// with the time its Node was stored Ready. It runs on the worker that booted the host, just after the
	// boot is recorded (AddNodes may have returned already).
	OnBoot func(node string, at time.Time)

	// KubeletPorts gives each simulated kubelet a real TCP port of KubeletAddress (127.0.0.1), a port per
	// node published in its Node's status (InternalIP KubeletAddress, unless NodeSpec.Addresses says
	// otherwise, and daemonEndpoints.kubeletEndpoint.Port), that accepts connections while the host has
	// power: closed at power-off, open again at power-on, the same port. For a prober of the kubelet (the
	// power watch's second reading). Off by default: a port and a goroutine per node.
	KubeletPorts bool

	// KubeletVersion is reported in each node's status. Default v1.36.3.
	KubeletVersion string
}

func (o Options) withDefaults() Options {
	if o.Name == "" {
		o.Name = DefaultName
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Power == nil {
		o.Power = AlwaysOn{}
	}
	if o.LeaseInterval <= 0 {
		o.LeaseInterval = DefaultLeaseInterval
	}
	if o.LeaseDuration <= 0 {
		o.LeaseDuration = DefaultLeaseDuration
	}
	if o.StatusInterval <= 0 {
		o.StatusInterval = DefaultStatusInterval
	}
	if o.BootDelay < 0 {
		o.BootDelay = 0
	} else if o.BootDelay == 0 {
		o.BootDelay = DefaultBootDelay
	}
	if o.RetryInterval <= 0 {
		o.RetryInterval = DefaultRetryInterval
	}
	if o.Workers <= 0 {
		o.Workers = DefaultWorkers
	}
	if o.KubeletVersion == "" {
		o.KubeletVersion = "v1.36.3"
	}
	return o
}

// NodeSpec is one node to simulate. Only Name is required.
type NodeSpec struct {
	Name string
	// Labels are added to the well-known ones (kubernetes.io/hostname, kubernetes.io/os,
	// kubernetes.io/arch) and SimulatorLabel.
	Labels map[string]string
	// Annotations are added to the node's.
	Annotations map[string]string
	// Capacity defaults to 8 CPUs, 32Gi of memory, 100Gi of ephemeral storage and 110 pods; allocatable
	// equals capacity.
	Capacity corev1.ResourceList
	// Addresses default to an InternalIP 10.x.y.z unique in the simulator, and the Hostname.
	Addresses []corev1.NodeAddress
	// Taints are the node's taints at registration (the kubelet's --register-with-taints).
	Taints []corev1.Taint
	// ProviderID is the node's spec.providerID at registration (the kubelet's --provider-id): what ties a
	// Cluster API Machine to its Node. Empty: none.
	ProviderID string
}

// Nodes names n nodes prefix-1 … prefix-n (the Redfish mock's system IDs are 1 … n too), with labels.
func Nodes(prefix string, n int, labels map[string]string) []NodeSpec {
	specs := make([]NodeSpec, n)
	for i := range specs {
		specs[i] = NodeSpec{Name: fmt.Sprintf("%s-%d", prefix, i+1), Labels: labels}
	}
	return specs
}

// defaultCapacity is a modest server.
func defaultCapacity() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("8"),
		corev1.ResourceMemory:           resource.MustParse("32Gi"),
		corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
		corev1.ResourcePods:             resource.MustParse("110"),
	}
}

// NewClient makes a clientset fit to drive thousands of nodes: protobuf, a high client-side rate limit
// (heartbeats must not queue behind one another) and a user agent naming the simulator. cfg is copied.
func NewClient(cfg *rest.Config, name string) (kubernetes.Interface, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 2000, 4000
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	if name == "" {
		name = DefaultName
	}
	cfg.UserAgent = "metalheal-" + name
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("making the simulator's client: %w", err)
	}
	return cs, nil
}
