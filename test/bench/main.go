package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// config is everything the flags set.
type config struct {
	nodes             int
	failures          int
	spreadOver        time.Duration
	unhealthyDuration time.Duration
	steady            time.Duration
	cycles            int
	bmcLatency        time.Duration
	powerDelay        time.Duration
	bootDelay         time.Duration
	leaseInterval     time.Duration
	gracePeriod       time.Duration
	bmcs              bool
	powerWatch        bool
	out               string
	controllerCmd     string
	checker           string
	remediationKind   string
	extraCRDs         string
	managerArgs       string
	pprofDir          string
	keepWorld         bool
	startupTimeout    time.Duration
	detectTimeout     time.Duration
	recoverTimeout    time.Duration
	floorRounds       int
	powerTimeout      time.Duration
	world             string
	clusters          int
	nodesPerCluster   int
}

// The worlds (--world).
const (
	worldSingle = "single"
	worldFleet  = "fleet"
)

// fleet reports whether the run is in the fleet world: workload clusters of their own.
func (c config) fleet() bool { return c.world == worldFleet }

// peer reports whether the controller under test is another command rather than metalheal's manager.
func (c config) peer() bool { return c.controllerCmd != "" }

// defaultRemediationKind is what metalheal's NodeHealthCheck creates in the bench.
const defaultRemediationKind = "remediation.metalheal.io/v1alpha1/PowerCycleRemediation"

func parseFlags(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.IntVar(&c.nodes, "nodes", 5000, "Simulated nodes (each with a Redfish system and, for metalheal, a BMC object).")
	fs.IntVar(&c.failures, "failures", 50, "Nodes that fail in each detection phase (spread, then burst); 0 skips detection.")
	fs.DurationVar(&c.spreadOver, "spread-over", 50*time.Second, "How long the spread failures are spread over.")
	fs.DurationVar(&c.unhealthyDuration, "unhealthy-duration", 5*time.Second, "How long Ready=False (or Unknown) must hold before a node is unhealthy.")
	fs.DurationVar(&c.steady, "steady", 2*time.Minute, "Length of the steady-state phase (no failures); 0 skips it.")
	fs.IntVar(&c.floorRounds, "floor-rounds", 3, "Before the burst, rounds of --failures creates the bench sends at once itself (the API server's floor for a burst); 0 skips them.")
	fs.IntVar(&c.cycles, "cycles", 500, "Power cycles started at once in the concurrency phase (at most --nodes); 0 skips the power-cycle phases (always skipped for a peer).")
	fs.DurationVar(&c.bmcLatency, "bmc-latency", 200*time.Millisecond, "Latency the Redfish mock adds to every request during the power-cycle phases.")
	fs.DurationVar(&c.powerDelay, "power-delay", 2*time.Second, "How long a simulated BMC takes to change a host's power state.")
	fs.DurationVar(&c.bootDelay, "boot-delay", 10*time.Second, "How long a simulated host takes from power-on to a Ready node.")
	fs.DurationVar(&c.leaseInterval, "lease-interval", 10*time.Second, "How often simulated kubelets renew their node lease (a kubelet's default is 10s; status is posted every 5m).")
	fs.DurationVar(&c.gracePeriod, "node-monitor-grace-period", 40*time.Second, "The controller-manager's node monitor grace period (silence before Ready=Unknown).")
	fs.BoolVar(&c.powerWatch, "power-watch", false, "After the steady phase, turn spec.powerWatch on for every BMC (each Redfish BMC's event stream followed) and measure the manager at rest again for --steady, with one stream open per BMC.")
	fs.BoolVar(&c.bmcs, "bmcs", true, "Create one BMC object per node (metalheal's BMC inventory then checks them all, as in production).")
	fs.StringVar(&c.out, "out", "bin/bench.json", "Where to write the JSON results.")
	fs.StringVar(&c.controllerCmd, "controller-cmd", "", "Peer mode: a shell command to run as the controller under test instead of metalheal's manager. "+
		"It runs with KUBECONFIG (a user in system:masters named "+peerUser+") and BENCH_* variables (see BENCHMARKS.md), and must set up its own objects.")
	fs.StringVar(&c.checker, "checker", "", "Measure one health checker as `bench peers` does, in the world its kind checks, with no BMC objects and no power cycles: "+
		strings.Join(checkerNames(), ", ")+" (the peers' managers from `make build-peers`, as their config/default ships them).")
	fs.StringVar(&c.remediationKind, "remediation-kind", defaultRemediationKind, "group/version/Kind of the remediation requests to watch for (named after, or annotated with, the node).")
	fs.StringVar(&c.extraCRDs, "extra-crds", "", "Comma-separated CRD files or directories to install when the world starts (a peer's kinds).")
	fs.StringVar(&c.managerArgs, "manager-args", "", "Extra flags for metalheal's manager, space-separated.")
	fs.StringVar(&c.pprofDir, "pprof-dir", "", "Save CPU and heap profiles of metalheal's manager here (CPU: start-up, steady, the first 30s of the concurrent power cycles; heap: after start-up, steady and burst; a Go execution trace from 1 s before the burst's expiry to 2 s after it, its reconciles told in burst.trace.txt).")
	fs.BoolVar(&c.keepWorld, "keep-world", false, "Keep the world's directory (logs, kubeconfigs, audit log) after the run.")
	fs.DurationVar(&c.startupTimeout, "startup-timeout", 10*time.Minute, "Bound on the start-up phase.")
	fs.DurationVar(&c.detectTimeout, "detect-timeout", 10*time.Minute, "Bound on waiting for every failed node's remediation request, after its expiry.")
	fs.DurationVar(&c.recoverTimeout, "recover-timeout", 5*time.Minute, "Bound on waiting for the failed nodes to be Ready and their requests gone.")
	fs.DurationVar(&c.powerTimeout, "power-timeout", 20*time.Minute, "Bound on a power-cycle phase.")
	fs.StringVar(&c.world, "world", worldSingle, "The world: "+worldSingle+" (one cluster of --nodes, metalheal's NodeHealthCheck) or "+worldFleet+
		" (a management cluster and --clusters workload clusters of --nodes-per-cluster, each its own API server, one MachineHealthCheck per cluster; "+
		"measures the manager at rest with one and with all clusters connected, each for --steady, then detection across the clusters).")
	fs.IntVar(&c.clusters, "clusters", 4, "Fleet world: workload clusters (each control plane costs about 400 MiB).")
	fs.IntVar(&c.nodesPerCluster, "nodes-per-cluster", 50, "Fleet world: simulated nodes per workload cluster.")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch c.world {
	case worldSingle:
	case worldFleet:
		if c.clusters < 1 || c.nodesPerCluster < 1 {
			return c, errors.New("--clusters and --nodes-per-cluster must be at least 1")
		}
		if set["nodes"] || c.checker != "" || c.controllerCmd != "" {
			return c, errors.New("--world=fleet sets the nodes from --clusters and --nodes-per-cluster, and measures metalheal's manager: no --nodes, --checker or --controller-cmd")
		}
		// The fleet's hosts are power-cycled by the remediator after detection; the floor and the
		// power-cycle phases are the single world's.
		c.nodes, c.cycles, c.floorRounds = c.clusters*c.nodesPerCluster, 0, 0
		set["cycles"] = true
	default:
		return c, fmt.Errorf("--world %q: want %s or %s", c.world, worldSingle, worldFleet)
	}
	if c.checker != "" {
		ch, ok := findChecker(c.checker)
		if !ok {
			return c, fmt.Errorf("--checker %q: want one of %s", c.checker, strings.Join(checkerNames(), ", "))
		}
		if ch.machines && 2*c.failures > c.nodes-1 {
			return c, fmt.Errorf("--failures must be at most half of the worker Machines (%d) for %s: the first Node's Machine is the control plane's", (c.nodes-1)/2, ch.name)
		}
		if c.controllerCmd != "" {
			return c, errors.New("--checker and --controller-cmd exclude each other")
		}
		// Every checker makes the same requests, which nothing remediates: the bench heals the nodes.
		c.bmcs, c.cycles, c.remediationKind = false, 0, defaultRemediationKind
		set["cycles"] = true
	}
	if !set["cycles"] {
		c.cycles = min(c.cycles, c.nodes) // a small world cycles every node
		if !c.bmcs || c.controllerCmd != "" {
			c.cycles = 0 // power cycles need metalheal's manager and BMC objects
		}
	}
	switch {
	case c.nodes < 1:
		return c, errors.New("--nodes must be at least 1")
	case c.failures < 0 || 2*c.failures > c.nodes:
		return c, fmt.Errorf("--failures must be between 0 and half of --nodes (%d)", c.nodes/2)
	case c.floorRounds < 0:
		return c, errors.New("--floor-rounds must be at least 0")
	case c.cycles < 0 || c.cycles > c.nodes:
		return c, fmt.Errorf("--cycles must be between 0 and --nodes (%d)", c.nodes)
	case c.cycles > 0 && !c.bmcs:
		return c, errors.New("--cycles needs --bmcs: the remediator finds each host's BMC through its BMC object")
	case c.unhealthyDuration < time.Second:
		return c, errors.New("--unhealthy-duration must be at least 1s (conditions carry whole seconds)")
	case c.leaseInterval*3 > c.gracePeriod:
		return c, errors.New("--lease-interval must be at most a third of --node-monitor-grace-period, or healthy nodes flap")
	}
	if _, err := parseKind(c.remediationKind); err != nil {
		return c, err
	}
	return c, nil
}

// parseKind reads group/version/Kind (or version/Kind for the core group).
func parseKind(s string) (schema.GroupVersionKind, error) {
	i := strings.LastIndex(s, "/")
	if i <= 0 || i == len(s)-1 {
		return schema.GroupVersionKind{}, fmt.Errorf("--remediation-kind %q: want group/version/Kind", s)
	}
	gv, err := schema.ParseGroupVersion(s[:i])
	if err != nil {
		return schema.GroupVersionKind{}, fmt.Errorf("--remediation-kind %q: %w", s, err)
	}
	return gv.WithKind(s[i+1:]), nil
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == watcherCommand {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		if err := runRequestWatcher(ctx, os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "bench request watcher:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == peersCommand {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		err := runPeers(ctx, os.Args[2:])
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench peers:", err)
			os.Exit(1)
		}
		return
	}
	cfg, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, strings.Join(os.Args, " ")); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}
