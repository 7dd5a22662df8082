package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/test/harness"
	"github.com/metalheal/metalheal/test/nodesim"
	"github.com/metalheal/metalheal/test/world"
)

// The fleet world (--world=fleet): a management cluster that holds the Clusters, Machines, BMCs and
// health checks, and --clusters workload clusters, each its own etcd, kube-apiserver,
// kube-controller-manager and simulated kubelets (harness.StartWorkloadClusters). metalheal's manager runs
// in the management cluster with one MachineHealthCheck per workload cluster and reads each cluster's
// Nodes through its kubeconfig Secret; its remediator power-cycles the workload hosts through their BMCs.
// Node names are unique across the fleet (the end-to-end fleet scenario covers repeated names): the
// detection phases key a failure by its Node.

// fleetNamespace holds, in the management cluster, the fleet's Clusters, Machines, checks and requests.
const fleetNamespace = "bench-fleet"

// fleet is the running fleet world.
type fleet struct {
	clusters []*harness.WorkloadCluster
	// hosts finds a workload Node's cluster: its API server and its kubelets' simulator.
	hosts map[string]fleetHost
	// checked counts the clusters, from the first, whose MachineHealthCheck exists.
	checked int
}

// fleetHost is where a workload Node lives.
type fleetHost struct {
	kube   kubernetes.Interface
	sim    *nodesim.Simulator
	system string // the Redfish mock's system of its host
}

// fleetClusterName names the i-th workload cluster (from 1).
func fleetClusterName(i int) string { return fmt.Sprintf("fleet-%d", i) }

// fleetNodeNames names cluster i's n Nodes, unique across the fleet and the management cluster.
func fleetNodeNames(i, n int) []string {
	names := make([]string, n)
	for j := range n {
		names[j] = fmt.Sprintf("c%d-worker-%03d", i, j+1)
	}
	return names
}

// fleetFailures picks the Nodes that fail, spread across the clusters: round-robin over the clusters,
// each cluster's last Nodes first; the first k fail in the spread, the next k in the burst. It needs 2k
// Nodes in all (clusters of equal size).
func fleetFailures(clusters [][]string, k int) (spread, burst []string) {
	var order []string
	for depth := 1; len(order) < 2*k; depth++ {
		added := false
		for _, nodes := range clusters {
			if depth <= len(nodes) && len(order) < 2*k {
				order = append(order, nodes[len(nodes)-depth])
				added = true
			}
		}
		if !added {
			break
		}
	}
	if len(order) < k {
		return order, nil
	}
	return order[:k], order[k:]
}

// startFleet starts the workload clusters and grants the manager what config/cluster-api grants in the
// fleet's namespace.
func (b *bench) startFleet(ctx context.Context) error {
	if err := b.h.GrantClusterNamespace(ctx, fleetNamespace); err != nil {
		return err
	}
	opts := harness.FleetOptions{
		Namespace:     fleetNamespace,
		MachineLabels: map[string]string{roleLabel: "worker"},
		World:         world.Options{NodeMonitorGracePeriod: b.cfg.gracePeriod, KeepDir: b.cfg.keepWorld},
	}
	for i := 1; i <= b.cfg.clusters; i++ {
		opts.Clusters = append(opts.Clusters, harness.Workload{Name: fleetClusterName(i), Nodes: fleetNodeNames(i, b.cfg.nodesPerCluster)})
	}
	start := time.Now()
	clusters, err := b.h.StartWorkloadClusters(ctx, opts)
	if err != nil {
		return fmt.Errorf("starting the workload clusters: %w", err)
	}
	b.fleet = &fleet{clusters: clusters, hosts: map[string]fleetHost{}}
	for _, c := range clusters {
		kube, err := nodesim.NewClient(c.World.RESTConfig(), "bench")
		if err != nil {
			return err
		}
		for _, n := range c.Nodes() {
			b.fleet.hosts[n] = fleetHost{kube: kube, sim: c.Sim, system: c.SystemID(n)}
		}
		if err := waitNodesLabelled(ctx, kube); err != nil {
			return fmt.Errorf("workload cluster %s: %w", c.Name, err)
		}
	}
	logf("fleet ready in %.0fs: %d workload clusters of %d nodes", time.Since(start).Seconds(), len(clusters), b.cfg.nodesPerCluster)
	return nil
}

// fleetDetectionNodes picks the spread's and the burst's Nodes across the clusters.
func (b *bench) fleetDetectionNodes() (spread, burst []string) {
	var nodes [][]string
	for _, c := range b.fleet.clusters {
		nodes = append(nodes, c.Nodes())
	}
	return fleetFailures(nodes, b.cfg.failures)
}

// createFleetCheck creates cluster's MachineHealthCheck: its worker Machines, Ready False or Unknown for
// --unhealthy-duration, no budget, the bench's power-cycle template.
func (b *bench) createFleetCheck(ctx context.Context, c *harness.WorkloadCluster) error {
	d := metav1.Duration{Duration: b.cfg.unhealthyDuration}
	all := intstr.FromString("100%")
	return b.h.Client.Create(ctx, &v1alpha1.MachineHealthCheck{
		ObjectMeta: metav1.ObjectMeta{Namespace: fleetNamespace, Name: c.Name},
		Spec: v1alpha1.MachineHealthCheckSpec{
			ClusterName: c.Name,
			Selector:    metav1.LabelSelector{MatchLabels: map[string]string{roleLabel: "worker"}},
			UnhealthyConditions: []v1alpha1.MachineUnhealthyCondition{
				{Type: "Ready", Status: "False", Timeout: d},
				{Type: "Ready", Status: "Unknown", Timeout: d},
			},
			MaxUnhealthy: &all,
			RemediationTemplate: &v1alpha1.TemplateReference{
				APIVersion: v1alpha1.GroupVersion.String(), Kind: "PowerCycleRemediationTemplate", Name: checkName},
		},
	})
}

// setUpFleetChecks creates the template and the first cluster's check: the manager starts connected to
// one workload cluster (the others' checks come in fleetRest).
func (b *bench) setUpFleetChecks(ctx context.Context) error {
	if err := b.createTemplate(ctx, fleetNamespace); err != nil {
		return err
	}
	b.fleet.checked = 1
	return b.createFleetCheck(ctx, b.fleet.clusters[0])
}

// fleetReady reports whether the checks created so far have seen every Machine of their cluster healthy
// ("" when they have, else what one shows).
func (b *bench) fleetReady(ctx context.Context) string {
	for _, c := range b.fleet.clusters[:b.fleet.checked] {
		var mhc v1alpha1.MachineHealthCheck
		if err := b.h.Client.Get(ctx, client.ObjectKey{Namespace: fleetNamespace, Name: c.Name}, &mhc); err != nil {
			return err.Error()
		}
		want := int32(b.cfg.nodesPerCluster)
		if e, h := ptr.Deref(mhc.Status.ExpectedMachines, 0), ptr.Deref(mhc.Status.CurrentHealthy, 0); e != want || h != want {
			return fmt.Sprintf("MachineHealthCheck %s: %d expected, %d healthy of %d", c.Name, e, h, want)
		}
	}
	return ""
}

// fleetRest measures the manager at rest connected to one workload cluster, then connects it to the
// others and measures it again: the difference is what each cluster connected costs.
func (b *bench) fleetRest(ctx context.Context) error {
	rest := func(name string) error {
		p := b.track.begin(name)
		p.Notes = append(p.Notes, fmt.Sprintf("no failures: %d of %d workload clusters connected", b.fleet.checked, len(b.fleet.clusters)))
		logf("%s: at rest for %s", name, b.cfg.steady)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(b.cfg.steady):
		}
		return nil
	}
	if err := rest(fleetRestPhase(1)); err != nil {
		return err
	}
	if len(b.fleet.clusters) == 1 {
		return nil
	}
	p := b.track.begin("connect")
	start := time.Now()
	for _, c := range b.fleet.clusters[1:] {
		if err := b.createFleetCheck(ctx, c); err != nil {
			return err
		}
	}
	b.fleet.checked = len(b.fleet.clusters)
	if err := b.waitManagerSynced(ctx); err != nil {
		return err
	}
	p.Notes = append(p.Notes, fmt.Sprintf("the other %d clusters' checks created: every Machine seen healthy in %.1fs", len(b.fleet.clusters)-1, time.Since(start).Seconds()))
	logf("connected to all %d workload clusters in %.1fs", len(b.fleet.clusters), time.Since(start).Seconds())
	return rest(fleetRestPhase(len(b.fleet.clusters)))
}

// fleetRestPhase names the phase at rest with n workload clusters connected.
func fleetRestPhase(n int) string { return fmt.Sprintf("rest-%d-clusters", n) }

// FleetSummary is the fleet world's figures: the manager at rest with one workload cluster connected and
// with all, what each cluster added, and detection across the clusters.
type FleetSummary struct {
	Clusters        int `json:"clusters"`
	NodesPerCluster int `json:"nodesPerCluster"`
	// One and All are the manager's costs at rest with one cluster connected and with all.
	One *Cost `json:"oneConnected,omitempty"`
	All *Cost `json:"allConnected,omitempty"`
	// PerClusterRSSMiB and PerClusterCPUPercent are (All - One) / (Clusters - 1).
	PerClusterRSSMiB     *float64 `json:"perClusterRSSMiB,omitempty"`
	PerClusterCPUPercent *float64 `json:"perClusterCPUPercent,omitempty"`
	// Spread and Burst are detection, condition expiry to request stored (audit log).
	Spread *Stats `json:"spreadStoredMs,omitempty"`
	Burst  *Stats `json:"burstStoredMs,omitempty"`
}

// summarizeFleet reads the fleet's figures from the phases and the detection phases.
func summarizeFleet(clusters, nodesPerCluster int, phases []*Phase, ds []Detection) *FleetSummary {
	s := &FleetSummary{Clusters: clusters, NodesPerCluster: nodesPerCluster}
	cost := func(name string) *Cost {
		for _, p := range phases {
			if c, ok := p.Costs[controllerMeter]; ok && p.Name == name {
				return &c
			}
		}
		return nil
	}
	s.One, s.All = cost(fleetRestPhase(1)), cost(fleetRestPhase(clusters))
	if s.One != nil && s.All != nil && clusters > 1 {
		n := float64(clusters - 1)
		s.PerClusterRSSMiB = ptr.To((s.All.PeakRSSMiB - s.One.PeakRSSMiB) / n)
		s.PerClusterCPUPercent = ptr.To((s.All.CPUPercent - s.One.CPUPercent) / n)
	}
	for _, d := range ds {
		switch d.Phase {
		case "spread":
			s.Spread = d.Created
		case "burst":
			s.Burst = d.Created
		}
	}
	return s
}

// print writes the fleet's table, as BENCHMARKS.md shows it.
func (s *FleetSummary) print(out io.Writer, failures int, spreadOver float64) {
	cost := func(c *Cost) string {
		if c == nil {
			return "–"
		}
		return fmt.Sprintf("%.0f MiB, %.2f%%", c.PeakRSSMiB, c.CPUPercent)
	}
	per := "–"
	if s.PerClusterRSSMiB != nil {
		per = fmt.Sprintf("%+.1f MiB, %+.2f%%", *s.PerClusterRSSMiB, *s.PerClusterCPUPercent)
	}
	det := func(st *Stats) string {
		if st == nil {
			return "–"
		}
		return fmt.Sprintf("%.1f / %.1f ms", st.P50, st.P99)
	}
	fmt.Fprintf(out, "\nFLEET: %d workload clusters x %d nodes; manager at rest (peak RSS, CPU %% of one core); detection = condition expiry -> request stored (audit log), p50 / p99\n",
		s.Clusters, s.NodesPerCluster)
	fmt.Fprintln(out, strings.Join([]string{"| 1 cluster connected", fmt.Sprintf("all %d connected", s.Clusters), "per cluster added",
		fmt.Sprintf("spread: %d hosts over %.0fs", failures, spreadOver), fmt.Sprintf("burst: %d hosts at once |", failures)}, " | "))
	fmt.Fprintln(out, "|---|---|---|---|---|")
	fmt.Fprintln(out, strings.Join([]string{"| " + cost(s.One), cost(s.All), per, det(s.Spread), det(s.Burst) + " |"}, " | "))
}
