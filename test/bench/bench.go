package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/testenv"
	"github.com/metalheal/metalheal/test/harness"
	"github.com/metalheal/metalheal/test/nodesim"
	"github.com/metalheal/metalheal/test/world"
)

// peerUser is who a peer controller is to the API server (group system:masters: it brings no RBAC of its
// own, and its requests are told apart by this name).
const peerUser = "bench:peer-controller"

// checkName names the NodeHealthCheck and the PowerCycleRemediationTemplate the bench creates.
const checkName = "bench"

// bench is one run.
type bench struct {
	cfg      config
	work     string // the bench's directory: audit policy and log, peer log, profiles
	auditLog string
	h        *harness.Harness
	kube     kubernetes.Interface
	emrGVK   schema.GroupVersionKind
	emrGVR   schema.GroupVersionResource
	emrs     *watcher
	// watcherPID is the request watcher's process (see watchRemediations), metered with the bench.
	watcherPID atomic.Int64
	track      *tracker
	ctrl       *controller
	// checker is the health checker measured (--checker); its zero value is metalheal's manager as a
	// plain run has it. peerSetup is what its world needs beyond metalheal's.
	checker   checker
	peerSetup *peerSetup
	// fleet is the fleet world's workload clusters (--world=fleet); nil in the single-cluster world.
	fleet  *fleet
	report *Report
	// powerLog hears the Redfish mock's power changes and the hosts' boots, for the power cycles' BMC view;
	// ends keeps what its last steps need until the audit log is read.
	powerLog powerLog
	ends     []waveEnds

	lastProfile chan struct{}  // closed when the last CPU profile is saved
	traces      sync.WaitGroup // the execution traces under way (traceBurst)

	// active are the failed nodes of the detection phase under way, for the watch callback.
	mu     sync.Mutex
	active map[string]*failureState
}

func run(ctx context.Context, cfg config, command string) (err error) {
	b := &bench{cfg: cfg, track: &tracker{}, active: map[string]*failureState{}}
	b.emrGVK, _ = parseKind(cfg.remediationKind)
	b.report = newReport(cfg, command)
	if b.work, err = os.MkdirTemp("", "metalheal-bench-"); err != nil {
		return err
	}
	b.checker, _ = findChecker(cfg.checker)
	b.report.Checker = cfg.checker
	defer func() {
		if !cfg.keepWorld {
			_ = os.RemoveAll(b.work)
		} else {
			logf("kept %s (audit log, peer log)", b.work)
		}
	}()

	setupStart := time.Now()
	if err := b.startWorld(ctx); err != nil {
		return err
	}
	defer b.h.Stop()
	if cfg.fleet() {
		if err := b.startFleet(ctx); err != nil {
			return err
		}
	}
	b.report.SetupSeconds = time.Since(setupStart).Seconds()
	logf("world ready in %.0fs: %d nodes; kubectl --kubeconfig=%s", b.report.SetupSeconds, cfg.nodes, b.h.World.Kubeconfig())

	trackCtx, stopTracking := context.WithCancel(ctx)
	defer stopTracking()
	b.addWorldMeters()
	go b.track.run(trackCtx)

	// Before the set-up: a peer started before its Machines were created must not outlive a failed set-up.
	defer func() {
		if b.ctrl != nil {
			_ = b.ctrl.stop()
		}
	}()
	if err := b.setUpCheck(ctx); err != nil {
		return err
	}
	defer func() {
		if b.emrs != nil {
			b.emrs.stop() // a process of its own: it would outlive the bench
		}
	}()

	if err := b.phases(ctx); err != nil {
		logf("run stopped early: %v", err)
		b.report.Error = err.Error()
	}

	phases := b.track.finish()
	b.waitProfiles()
	if err := b.ctrl.stop(); err != nil {
		logf("stopping the controller: %v", err)
	}
	time.Sleep(2 * time.Second) // the audit log is flushed every second
	reqs, aerr := readAudit(b.auditLog, append([]string{b.ctrl.user}, b.ctrl.users...)...)
	if aerr != nil {
		logf("reading the audit log: %v", aerr)
	}
	attribute(phases, reqs)
	noteWatchEnds(phases, b.ctrl.logPath)
	decompose(b.report.Detection, reqs, b.emrGVR.Resource)
	b.finishSteps(reqs)
	b.report.Phases = phases
	if b.fleet != nil {
		b.report.Fleet = summarizeFleet(cfg.clusters, cfg.nodesPerCluster, phases, b.report.Detection)
	}
	b.report.finish()
	b.report.print(os.Stdout)
	if werr := b.report.write(cfg.out); werr != nil {
		return werr
	}
	logf("results written to %s", cfg.out)
	if b.report.Error != "" {
		return errors.New(b.report.Error)
	}
	return nil
}

// setUpCheck creates the health check and starts the controller under test, in the order each needs:
// metalheal's manager finds its check and its world in place; a peer's webhooks must answer before its
// objects (Cluster API's Machines among them) are created.
func (b *bench) setUpCheck(ctx context.Context) error {
	switch {
	case b.cfg.peer():
		return b.startController(ctx)
	case b.fleet != nil:
		if err := b.setUpFleetChecks(ctx); err != nil {
			return err
		}
		return b.startController(ctx)
	case b.cfg.checker == "":
		if err := b.createCheck(ctx); err != nil {
			return err
		}
		return b.startController(ctx)
	case b.checker.peer == nil:
		if b.checker.machines {
			if err := b.machineWorld(ctx); err != nil {
				return err
			}
		}
		if err := b.createCheckerCheck(ctx); err != nil {
			return err
		}
		return b.startController(ctx)
	}
	if err := b.startBuiltinPeer(ctx); err != nil {
		return err
	}
	if b.checker.machines {
		if err := b.machineWorld(ctx); err != nil {
			return err
		}
	}
	return b.createCheckerCheck(ctx)
}

// phases runs the measured phases in order.
func (b *bench) phases(ctx context.Context) error {
	if err := b.waitStartup(ctx); err != nil {
		return err
	}
	if b.fleet != nil {
		if err := b.fleetRest(ctx); err != nil {
			return err
		}
	} else if b.cfg.steady > 0 {
		if err := b.waitPeriodicChecks(ctx); err != nil {
			return err
		}
		p := b.track.begin("steady")
		b.profile(ctx, "steady", b.cfg.steady)
		logf("steady state for %s", b.cfg.steady)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(b.cfg.steady):
		}
		b.heapProfile(ctx, "after-steady")
		p.Notes = append(p.Notes, "no failures")
		if err := b.powerWatchRest(ctx); err != nil {
			return err
		}
	}
	if b.cfg.failures > 0 {
		spread, burst := b.detectionNodes()
		if b.fleet != nil {
			spread, burst = b.fleetDetectionNodes()
		}
		d, err := b.detect(ctx, "spread", spread, b.cfg.spreadOver)
		b.report.Detection = append(b.report.Detection, d)
		if err != nil {
			return err
		}
		if b.cfg.floorRounds > 0 {
			b.report.Floor = b.measureFloor(ctx, burst, b.cfg.floorRounds)
		}
		d, err = b.detect(ctx, "burst", burst, 0)
		b.report.Detection = append(b.report.Detection, d)
		if err != nil {
			return err
		}
		b.heapProfile(ctx, "after-burst")
	}
	if b.cfg.cycles > 0 && !b.cfg.peer() {
		if err := b.powerCycles(ctx); err != nil {
			return err
		}
	}
	return nil
}

// startWorld starts the control plane (with the audit log), the Redfish mock, the simulated nodes, the
// BMCs and metalheal's RBAC.
func (b *bench) startWorld(ctx context.Context) error {
	users := []string{harness.ManagerUser, peerUser}
	var extraCRDs []string
	kustomization := ""
	if b.cfg.checker != "" {
		s, u, err := b.prepareChecker()
		if err != nil {
			return fmt.Errorf("preparing %s: %w", b.cfg.checker, err)
		}
		b.peerSetup, users, extraCRDs = s, u, s.extraCRDPaths(b.checker)
		if b.checker.machines {
			kustomization = "config/cluster-api" // the kubeconfig-readers component, as the docs deploy it
		}
	}
	apiArgs, logPath, err := writeAuditPolicy(b.work, users...)
	if err != nil {
		return err
	}
	b.auditLog = logPath
	wopts := world.Options{
		NodeMonitorGracePeriod: b.cfg.gracePeriod,
		APIServerArgs:          apiArgs,
		KeepDir:                b.cfg.keepWorld,
		ExtraCRDPaths:          extraCRDs,
	}
	workers, skipBMCs := b.cfg.nodes, b.cfg.peer() || !b.cfg.bmcs
	if b.cfg.fleet() {
		// One management Node, no BMC of its own: the fleet's hosts are the workload clusters'.
		workers, skipBMCs = 1, true
		capi, err := testenv.ClusterAPICRDs()
		if err != nil {
			return err
		}
		wopts.ExtraCRDPaths = append(wopts.ExtraCRDPaths, capi)
	}
	for _, p := range strings.Split(b.cfg.extraCRDs, ",") {
		if p = strings.TrimSpace(p); p != "" {
			wopts.ExtraCRDPaths = append(wopts.ExtraCRDPaths, p)
		}
	}
	logf("starting a world of %d nodes (lease every %s, grace %s, boot %s, power change %s)",
		b.cfg.nodes, b.cfg.leaseInterval, b.cfg.gracePeriod, b.cfg.bootDelay, b.cfg.powerDelay)
	b.h, err = harness.Start(ctx, harness.Options{
		Workers:       workers,
		World:         wopts,
		LeaseInterval: b.cfg.leaseInterval,
		BootDelay:     b.cfg.bootDelay,
		PowerDelay:    b.cfg.powerDelay,
		SkipBMCs:      skipBMCs,
		// The power cycles' BMC view reads a whole batch's requests (about 15 per cycle, and the periodic
		// checks): the default record of 10,000 would drop the start of a batch of 500.
		RedfishRequestLimit: 200000,
		OnBoot:              b.powerLog.booted,
		Log:                 logWriter{},
		Kustomization:       kustomization,
	})
	if err != nil {
		return fmt.Errorf("starting the world: %w", err)
	}
	b.powerLog.listen(b.h.Mock)
	if b.kube, err = nodesim.NewClient(b.h.World.RESTConfig(), "bench"); err != nil {
		return err
	}
	return waitNodesLabelled(ctx, b.kube)
}

// waitNodesLabelled waits until the node lifecycle controller has given every node the legacy
// beta.kubernetes.io/{os,arch} labels, as it does once per node after registration: until then the
// Nodes' labels change at the controller-manager's pace (minutes at 5,000 nodes), and a health check
// reacts to label changes, so no measured phase would be steady.
func waitNodesLabelled(ctx context.Context, kube kubernetes.Interface) error {
	const selector = "!beta.kubernetes.io/os"
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	start := time.Now()
	for {
		list, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err == nil && len(list.Items) == 0 {
			logf("the controller-manager has labelled every node (%.0fs)", time.Since(start).Seconds())
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the controller-manager to label the nodes: %w", ctx.Err())
		case <-time.After(2 * time.Second):
		}
	}
}

// addWorldMeters meters the control plane's processes and the bench itself (which hosts the node
// simulator and the Redfish mock).
func (b *bench) addWorldMeters() {
	procs, err := b.h.World.Processes()
	if err != nil {
		logf("cannot meter the control plane: %v", err)
	}
	for _, p := range procs {
		pid := p.PID
		b.track.add(&meter{name: p.Name, pids: func() []int { return []int{pid} }})
	}
	self := os.Getpid()
	b.track.add(&meter{name: benchMeter, pids: func() []int {
		if w := int(b.watcherPID.Load()); w > 0 {
			return []int{self, w}
		}
		return []int{self}
	}})
	b.track.mu.Lock()
	b.track.lag = b.h.Sim.TakeMaxLeaseDelay
	b.track.server = b.serverCounters
	b.track.peaks = b.etcdGauges
	b.track.mu.Unlock()
}

// benchMeter names the bench's processes in the costs: the node simulator, the Redfish mock and the
// bench, and the bench's request watcher.
const benchMeter = "bench(nodesim+redfish-mock)"

// pcrSpec is the power-cycle spec of the bench's template and of the requests it creates itself.
func pcrSpec() v1alpha1.PowerCycleRemediationSpec {
	return v1alpha1.PowerCycleRemediationSpec{
		Strategy:               v1alpha1.StrategyReboot,
		DeleteAfterRetries:     ptr.To(int32(3)),
		PowerOffTimeoutSeconds: 120,
		PowerOnTimeoutSeconds:  600,
		RetryBackoff:           &v1alpha1.RetryBackoff{Initial: metav1.Duration{Duration: 30 * time.Second}, Max: metav1.Duration{Duration: 10 * time.Minute}},
		OutOfServiceTaint:      ptr.To(true),
	}
}

// createCheck creates metalheal's NodeHealthCheck over every worker and its PowerCycleRemediationTemplate.
func (b *bench) createCheck(ctx context.Context) error {
	tpl := &v1alpha1.PowerCycleRemediationTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: checkName, Namespace: harness.Namespace},
		Spec:       v1alpha1.PowerCycleRemediationTemplateSpec{Template: v1alpha1.PowerCycleRemediationTemplateResource{Spec: pcrSpec()}},
	}
	d := metav1.Duration{Duration: b.cfg.unhealthyDuration}
	check := &v1alpha1.NodeHealthCheck{
		ObjectMeta: metav1.ObjectMeta{Name: checkName},
		Spec: v1alpha1.NodeHealthCheckSpec{
			UnhealthyConditions: []v1alpha1.NodeUnhealthyCondition{
				{Type: string(corev1.NodeReady), Status: "False", Duration: d},
				{Type: string(corev1.NodeReady), Status: "Unknown", Duration: d},
			},
			RemediationTemplate: &v1alpha1.TemplateReference{
				APIVersion: v1alpha1.GroupVersion.String(), Kind: "PowerCycleRemediationTemplate",
				Name: checkName, Namespace: harness.Namespace,
			},
		},
	}
	for _, obj := range []client.Object{tpl, check} {
		if err := b.h.Client.Create(ctx, obj); err != nil {
			return fmt.Errorf("creating %T %s: %w", obj, obj.GetName(), err)
		}
	}
	return nil
}

// controller is the process under test.
type controller struct {
	name string
	user string
	// users are other users whose requests are the controller's too (a workload cluster's kubeconfig).
	users      []string
	meter      *meter
	metricsURL string // metalheal's manager only
	pprofAddr  string // metalheal's manager with --pprof-dir only
	logPath    string
	stopOnce   sync.Once
	stopErr    error
	stopFn     func() error
}

func (c *controller) stop() error {
	c.stopOnce.Do(func() { c.stopErr = c.stopFn() })
	return c.stopErr
}

// startController starts the start-up phase and the controller under test.
func (b *bench) startController(ctx context.Context) error {
	if b.cfg.peer() {
		return b.startPeer(ctx)
	}
	if _, err := harness.BuildManager(ctx); err != nil { // outside the phase: the start-up measures the manager
		return err
	}
	// Plain HTTP metrics, for the bench only: with the deployed HTTPS endpoint every scrape would also cost
	// the API server a TokenReview and a SubjectAccessReview from the manager's user (cached a minute or
	// more, but still counted in the audit of the manager's requests this bench reports).
	args := []string{"--metrics-secure=false"}
	pprofAddr := ""
	if b.cfg.pprofDir != "" {
		port, err := freePort()
		if err != nil {
			return err
		}
		pprofAddr = "127.0.0.1:" + strconv.Itoa(port)
		args = append(args, "--pprof-bind-address="+pprofAddr)
		if err := os.MkdirAll(b.cfg.pprofDir, 0o755); err != nil {
			return err
		}
	}
	if b.cfg.checker != "" {
		args = append(args, b.checker.metalhealManagerArgs()...)
	}
	if b.fleet != nil {
		// As config/cluster-api's Deployment carries them, for the fleet's namespace.
		args = append(args, "--cluster-namespaces="+fleetNamespace, "--remediation-namespaces="+fleetNamespace)
	}
	args = append(args, strings.Fields(b.cfg.managerArgs)...)
	b.track.begin("startup")
	logf("starting metalheal's manager %s", strings.Join(args, " "))
	m, err := b.h.StartManager(ctx, args...)
	if err != nil {
		return err
	}
	pid := m.PID()
	name := "metalheal-manager"
	if b.cfg.checker != "" {
		name = b.cfg.checker
	}
	b.ctrl = &controller{
		name: name, user: harness.ManagerUser, metricsURL: m.MetricsURL, pprofAddr: pprofAddr, logPath: m.LogPath,
		meter:  &meter{name: controllerMeter, pids: func() []int { return []int{pid} }},
		stopFn: m.Stop,
	}
	b.track.add(b.ctrl.meter)
	b.track.mu.Lock()
	b.track.counters = b.reconcileCounts
	b.track.gauges = b.runtimeGauges
	b.track.mu.Unlock()
	b.report.Controller = ControllerInfo{Name: b.ctrl.name, User: b.ctrl.user, Args: args, Log: m.LogPath}
	return nil
}

// reconcileCounts reads metalheal's manager's reconciles by controller; nil when it cannot.
func (b *bench) reconcileCounts() map[string]float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m := b.managerMetrics(ctx)
	if m == nil {
		return nil
	}
	out := map[string]float64{}
	for _, name := range []string{"nodehealthcheck", "powercycleremediation", "bmc", "machinehealthcheck"} {
		if v := m.sum("controller_runtime_reconcile_total", `controller="`+name+`"`); v > 0 {
			out[name] = v
			out[name+" seconds"] = m.sum("controller_runtime_reconcile_time_seconds_sum", `controller="`+name+`"`)
		}
	}
	return out
}

// runtimeGauges reads metalheal's manager's goroutines and Go heap; nil when it cannot.
func (b *bench) runtimeGauges() map[string]float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m := b.managerMetrics(ctx)
	if m == nil {
		return nil
	}
	return map[string]float64{
		"goroutines":     m.sum("go_goroutines"),
		"heapInuseMiB":   m.sum("go_memstats_heap_inuse_bytes") / (1 << 20),
		"stackInuseMiB":  m.sum("go_memstats_stack_inuse_bytes") / (1 << 20),
		"heapGoalMiB":    m.sum("go_memstats_next_gc_bytes") / (1 << 20),
		"processOpenFDs": m.sum("process_open_fds"),
		"processRSSMiB":  m.sum("process_resident_memory_bytes") / (1 << 20),
	}
}

// controllerMeter names the controller under test in the costs.
const controllerMeter = "controller"

// startPeer runs --controller-cmd as the controller under test, in a process group of its own.
func (b *bench) startPeer(ctx context.Context) error {
	u, err := b.h.World.AddUser(peerUser, []string{"system:masters"}, nil)
	if err != nil {
		return err
	}
	logPath := filepath.Join(b.work, "peer.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	cmd := exec.Command("sh", "-c", b.cfg.controllerCmd)
	cmd.Env = append(os.Environ(),
		"KUBECONFIG="+u.Kubeconfig,
		"BENCH_ADMIN_KUBECONFIG="+b.h.World.Kubeconfig(),
		"BENCH_NODES="+strconv.Itoa(b.cfg.nodes),
		"BENCH_NODE_SELECTOR=node-role.kubernetes.io/worker",
		"BENCH_UNHEALTHY_DURATION="+b.cfg.unhealthyDuration.String(),
		"BENCH_NAMESPACE="+harness.Namespace,
		"BENCH_REMEDIATION_KIND="+b.cfg.remediationKind,
	)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	b.track.begin("startup")
	logf("starting the peer controller: %s (log %s)", b.cfg.controllerCmd, logPath)
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("starting --controller-cmd: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(exited)
	}()
	pgid := cmd.Process.Pid
	b.ctrl = &controller{
		name: "peer", user: peerUser, logPath: logPath,
		meter: &meter{name: controllerMeter, pids: processGroup(pgid)},
		stopFn: func() error {
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
			select {
			case <-exited:
				return nil
			case <-time.After(15 * time.Second):
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
				<-exited
				return errors.New("the peer controller did not stop within 15s of SIGTERM")
			}
		},
	}
	b.track.add(b.ctrl.meter)
	b.report.Controller = ControllerInfo{Name: "peer", User: peerUser, Command: b.cfg.controllerCmd, Log: logPath}
	return nil
}

// waitStartup ends the start-up phase: metalheal's manager has seen every node and checked every BMC
// (its work queues are empty); a peer has gone quiet (under 5% of a core for 10s). Then the remediation
// kind is watched.
func (b *bench) waitStartup(ctx context.Context) error {
	start := time.Now()
	b.profile(ctx, "startup", 30*time.Second) // not waited for: it may run on into the next phase
	if b.cfg.peer() || b.checker.peer != nil {
		if b.checker.peer != nil {
			if err := b.waitCheckerReady(ctx); err != nil {
				return err
			}
		}
		if err := waitQuiet(ctx, b.ctrl.meter, 10*time.Second, 5, b.cfg.startupTimeout); err != nil {
			return err
		}
	} else if err := b.waitManagerSynced(ctx); err != nil {
		return err
	}
	logf("start-up done in %.1fs", time.Since(start).Seconds())
	b.heapProfile(ctx, "after-startup")

	deadline := time.Now().Add(b.cfg.startupTimeout)
	for {
		m, err := b.h.Client.RESTMapper().RESTMapping(b.emrGVK.GroupKind(), b.emrGVK.Version)
		if err == nil {
			b.emrGVR = m.Resource
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("remediation kind %s is not served: %w", b.emrGVK, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
	var err error
	b.emrs, err = watchRemediations(ctx, b.h.World.Kubeconfig(), b.emrGVR, b.onRemediation)
	if err != nil {
		return err
	}
	b.watcherPID.Store(int64(b.emrs.pid))
	return nil
}

// waitManagerSynced waits until metalheal's NodeHealthCheck has seen every node and the manager's work
// queues are empty after every BMC was reconciled at least once.
func (b *bench) waitManagerSynced(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.startupTimeout)
	defer cancel()
	bmcs := 0
	if b.cfg.bmcs {
		bmcs = b.cfg.nodes
	}
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	var last string
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the manager's start-up (last: %s): %w", last, ctx.Err())
		case <-tick.C:
		}
		if b.fleet != nil {
			if last = b.fleetReady(ctx); last != "" {
				continue
			}
		} else if b.cfg.checker != "" {
			if last = b.checkerReady(ctx); last != "" {
				continue
			}
		} else {
			var check v1alpha1.NodeHealthCheck
			if err := b.h.Client.Get(ctx, client.ObjectKey{Name: checkName}, &check); err != nil {
				last = err.Error()
				continue
			}
			observed := ptr.Deref(check.Status.ObservedNodes, 0)
			if int(observed) != b.cfg.nodes {
				last = fmt.Sprintf("NodeHealthCheck observes %d nodes", observed)
				continue
			}
		}
		m, err := scrape(ctx, b.ctrl.metricsURL)
		if err != nil {
			last = err.Error()
			continue
		}
		reconciled := m.sum("controller_runtime_reconcile_total", `controller="bmc"`)
		depth := m.sum("workqueue_depth", `name="bmc"`) + m.sum("workqueue_depth", `name="nodehealthcheck"`) + m.sum("workqueue_depth", `name="machinehealthcheck"`)
		if int(reconciled) < bmcs || depth > 0 {
			last = fmt.Sprintf("%d of %d BMCs reconciled, %d queued", int(reconciled), bmcs, int(depth))
			continue
		}
		return nil
	}
}

// bmcCheckInterval is the manager's default --bmc-check-interval.
const bmcCheckInterval = 5 * time.Minute

// waitPeriodicChecks waits, when metalheal's manager checks BMCs, until the BMC inventory has begun its
// periodic checks (each BMC is checked when first seen, then once per --bmc-check-interval in its own
// slot, the first slot at least half an interval later): a steady state without them would leave out
// what a cluster of this size costs in every interval. Bounded by the check interval and a minute.
func (b *bench) waitPeriodicChecks(ctx context.Context) error {
	if b.cfg.peer() || !b.cfg.bmcs {
		return nil
	}
	logf("waiting for the BMC inventory's periodic checks to begin, so that the steady state includes them")
	p := b.track.begin("settle")
	p.Notes = append(p.Notes, "no failures: waiting for the BMC inventory's periodic checks to begin")
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, bmcCheckInterval+time.Minute)
	defer cancel()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the BMC inventory's periodic checks: %w", ctx.Err())
		case <-tick.C:
		}
		m := b.managerMetrics(ctx)
		if m == nil {
			continue
		}
		if m.sum("metalheal_bmc_checks_total") > float64(b.cfg.nodes) {
			logf("periodic BMC checks under way after %s", time.Since(start).Round(time.Second))
			return nil
		}
	}
}

// profile fetches a CPU profile of metalheal's manager covering the next d (or what is left of it once
// the previous profile is done: one CPU profile at a time), in the background, when --pprof-dir is set.
// run waits for the profiles before it stops the manager.
func (b *bench) profile(ctx context.Context, name string, d time.Duration) {
	if b.ctrl == nil || b.ctrl.pprofAddr == "" {
		return
	}
	until := time.Now().Add(d)
	prev := b.lastProfile
	done := make(chan struct{})
	b.lastProfile = done
	go func() {
		defer close(done)
		if prev != nil {
			<-prev
		}
		secs := int(time.Until(until).Seconds())
		if secs < 5 {
			logf("no CPU profile of %s: the previous one ran until its end", name)
			return
		}
		url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", b.ctrl.pprofAddr, secs)
		if err := fetch(ctx, url, filepath.Join(b.cfg.pprofDir, name+".cpu.pprof")); err != nil {
			logf("profiling %s: %v", name, err)
		}
	}()
}

// waitProfiles waits for the CPU profiles under way.
func (b *bench) waitProfiles() {
	if b.lastProfile != nil {
		<-b.lastProfile
	}
	b.traces.Wait()
}

// heapProfile saves a heap profile of metalheal's manager, when --pprof-dir is set.
func (b *bench) heapProfile(ctx context.Context, name string) {
	if b.ctrl == nil || b.ctrl.pprofAddr == "" {
		return
	}
	url := fmt.Sprintf("http://%s/debug/pprof/heap", b.ctrl.pprofAddr)
	if err := fetch(ctx, url, filepath.Join(b.cfg.pprofDir, name+".heap.pprof")); err != nil {
		logf("heap profile %s: %v", name, err)
	}
}

func fetch(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// logWriter writes progress lines to stderr with a timestamp.
type logWriter struct{}

func (logWriter) Write(p []byte) (int, error) {
	logf("%s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s bench: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// machine describes where the bench ran.
func machine() Machine {
	host, _ := os.Hostname()
	return Machine{CPUs: runtime.NumCPU(), MemoryGiB: memoryGiB(), CPUModel: cpuModel(), Host: host, LoadAvg: loadAvg(), GoVersion: runtime.Version()}
}
