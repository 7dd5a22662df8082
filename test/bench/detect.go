package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/metalheal/metalheal/test/harness"
	"github.com/metalheal/metalheal/test/nodesim"
	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
)

// quietGap is how long a node's simulated kubelet has been hung before the bench posts its Ready=False:
// long enough for a heartbeat already on its way to land first, so nothing overwrites the condition.
const quietGap = 300 * time.Millisecond

// Failure is one failed node of a detection phase.
type Failure struct {
	Node string `json:"node"`
	// Transition is the lastTransitionTime the bench wrote on the node's Ready=False condition (a whole
	// second, as conditions carry), Posted when the API server answered that write, Expiry Transition
	// plus the unhealthy duration.
	Transition time.Time `json:"transition"`
	Posted     time.Time `json:"posted"`
	Expiry     time.Time `json:"expiry"`
	// Seen is when the bench's watch received the remediation request; Created its creationTimestamp.
	Seen    *time.Time `json:"seen,omitempty"`
	Created *time.Time `json:"created,omitempty"`
	// DelayMs is Seen minus Expiry.
	DelayMs *float64 `json:"delayMs,omitempty"`
	// Request is the remediation request's namespace/name.
	Request string `json:"request,omitempty"`
	// From the API server's audit log, counted from Expiry: DecidedMs when the controller's first write
	// for the node arrived (metalheal takes the node's lease first), CreateSentMs when its create of the
	// request arrived, CreatedMs when the API server had stored it.
	DecidedMs    *float64 `json:"decidedMs,omitempty"`
	CreateSentMs *float64 `json:"createSentMs,omitempty"`
	CreatedMs    *float64 `json:"createdMs,omitempty"`
	// BMCRequestsNear counts the Redfish requests the BMC simulator received from 300 ms before Expiry to
	// 100 ms after it: the periodic BMC checks the controller was making when it had to act.
	BMCRequestsNear *int `json:"bmcRequestsNear,omitempty"`
	// Verified: when the request appeared, the node still showed the condition the bench wrote.
	Verified bool `json:"verified"`
	// Reposts counts the times the condition was found overwritten and posted again (see holdNotReady).
	Reposts int    `json:"reposts,omitempty"`
	Error   string `json:"error,omitempty"`
}

// Detection is the outcome of one detection phase.
type Detection struct {
	Phase    string  `json:"phase"`
	Failures int     `json:"failures"`
	Detected int     `json:"detected"`
	Stats    *Stats  `json:"delayMs,omitempty"`
	Over     float64 `json:"failedOverSeconds"`
	// Recovered: every failed node was Ready again, and its request gone, within --recover-timeout;
	// RecoverSeconds counts from the last expiry.
	Recovered      bool    `json:"recovered"`
	RecoverSeconds float64 `json:"recoverSeconds"`
	// Decided, CreateSent and Created summarise the audit log's view of the same delays (see Failure):
	// what the controller takes, and what the API server adds.
	Decided    *Stats `json:"decidedMs,omitempty"`
	CreateSent *Stats `json:"createSentMs,omitempty"`
	Created    *Stats `json:"createdMs,omitempty"`
	// ManagerHistogram is metalheal_detection_delay_seconds over the phase, as the manager measures it
	// (from expiry to the create call's return), for comparison; read once the nodes have recovered.
	ManagerHistogram *Histogram `json:"managerHistogram,omitempty"`
	Nodes            []Failure  `json:"nodes"`
}

// failureState is a failed node while its phase runs.
type failureState struct {
	mu sync.Mutex
	f  Failure
}

// detectionNodes picks the nodes that fail: the last 2K workers, spread first, then burst (the power
// cycles take the first ones).
func (b *bench) detectionNodes() (spread, burst []string) {
	n, k := b.cfg.nodes, b.cfg.failures
	for i := range k {
		spread = append(spread, harness.NodeName(n-2*k+1+i))
		burst = append(burst, harness.NodeName(n-k+1+i))
	}
	return spread, burst
}

// benchHeals reports whether the bench heals failed nodes itself once their request is seen: unless
// metalheal's remediator power-cycles them (its own kind, with BMC objects to find the hosts by).
func (b *bench) benchHeals() bool {
	return b.cfg.peer() || b.emrGVK.Kind != "PowerCycleRemediation" || !b.cfg.bmcs
}

// detect fails nodes (over `over`, or at once when over is zero) and measures how long after its
// condition expired each one's remediation request appears; then it waits for the nodes to recover.
func (b *bench) detect(ctx context.Context, name string, nodes []string, over time.Duration) (Detection, error) {
	d := Detection{Phase: name, Failures: len(nodes), Over: over.Seconds()}
	p := b.track.begin(name)
	before := b.managerMetrics(ctx)
	if over == 0 {
		b.profile(ctx, name, 30*time.Second)
	}

	states := make([]*failureState, len(nodes))
	b.mu.Lock()
	b.active = map[string]*failureState{}
	for i, n := range nodes {
		states[i] = &failureState{f: Failure{Node: n}}
		b.active[n] = states[i]
	}
	b.mu.Unlock()
	start := time.Now()
	if over > 0 {
		logf("%s: failing %d nodes one after another over %s", name, len(nodes), over)
		interval := over / time.Duration(len(nodes))
		var wg sync.WaitGroup
		for i, st := range states {
			select {
			case <-ctx.Done():
				return d, ctx.Err()
			case <-time.After(time.Until(start.Add(time.Duration(i) * interval))):
			}
			wg.Go(func() {
				if err := b.simOf(st.f.Node).InjectFault(st.f.Node, nodesim.FaultTransient); err != nil {
					st.setError(err)
					return
				}
				time.Sleep(quietGap)
				b.holdNotReady(ctx, st, time.Now().Truncate(time.Second))
			})
		}
		wg.Wait()
	} else {
		logf("%s: failing %d nodes at once", name, len(nodes))
		for _, st := range states {
			if err := b.simOf(st.f.Node).InjectFault(st.f.Node, nodesim.FaultTransient); err != nil {
				st.setError(err)
			}
		}
		time.Sleep(quietGap)
		transition := time.Now().Truncate(time.Second)
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(64)
		for _, st := range states {
			g.Go(func() error {
				b.holdNotReady(gctx, st, transition)
				return nil
			})
		}
		_ = g.Wait()
		b.traceBurst(ctx, name, transition.Add(b.cfg.unhealthyDuration))
	}

	// Wait for every request.
	var lastExpiry time.Time
	for _, st := range states {
		if f := st.get(); f.Expiry.After(lastExpiry) {
			lastExpiry = f.Expiry
		}
	}
	deadline := lastExpiry.Add(b.cfg.detectTimeout)
	for {
		seen := b.emrs.since(start)
		missing := 0
		for _, st := range states {
			if _, ok := seen[st.f.Node]; !ok {
				missing++
			}
		}
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			p.Notes = append(p.Notes, fmt.Sprintf("%d of %d requests not seen within %s of the last expiry", missing, len(nodes), b.cfg.detectTimeout))
			break
		}
		select {
		case <-ctx.Done():
			return d, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	seen := b.emrs.since(start)
	var delays []float64
	for _, st := range states {
		st.mu.Lock()
		if s, ok := seen[st.f.Node]; ok && !st.f.Expiry.IsZero() {
			delay := float64(s.Seen.Sub(st.f.Expiry).Microseconds()) / 1000
			st.f.Seen, st.f.Created, st.f.DelayMs = &s.Seen, &s.Created, &delay
			st.f.Request = s.Namespace + "/" + s.Name
			delays = append(delays, delay)
			d.Detected++
		}
		st.mu.Unlock()
	}
	b.countNearbyBMCRequests(states)
	d.Stats = stats(delays)
	if d.Stats != nil {
		logf("%s: %d/%d detected; delay after expiry p50 %.1fms p95 %.1fms p99 %.1fms max %.1fms",
			name, d.Detected, len(nodes), d.Stats.P50, d.Stats.P95, d.Stats.P99, d.Stats.Max)
	}
	// Wait for recovery: metalheal power-cycles the nodes; for a peer, the bench has healed them.
	recovered, err := b.waitRecovered(ctx, nodes, b.cfg.recoverTimeout)
	if err != nil {
		return d, err
	}
	d.Recovered = recovered
	d.RecoverSeconds = time.Since(lastExpiry).Seconds()
	if !recovered {
		p.Notes = append(p.Notes, fmt.Sprintf("nodes not recovered within %s: healed by the bench", b.cfg.recoverTimeout))
		b.forceHeal(nodes)
		if _, err := b.waitRecovered(ctx, nodes, b.cfg.recoverTimeout); err != nil {
			return d, err
		}
	} else {
		logf("%s: nodes recovered %.1fs after the last expiry", name, d.RecoverSeconds)
	}
	// Read only now: the manager records a creation once the reconcile that made it has also taken the
	// leases, which in a burst at scale is after the bench has seen every request.
	if after := b.managerMetrics(ctx); before != nil && after != nil {
		h := after.histogram("metalheal_detection_delay_seconds").minus(before.histogram("metalheal_detection_delay_seconds"))
		d.ManagerHistogram = &h
	}
	b.mu.Lock()
	b.active = map[string]*failureState{}
	b.mu.Unlock()
	for _, st := range states {
		d.Nodes = append(d.Nodes, st.get())
	}
	sort.Slice(d.Nodes, func(i, j int) bool { return d.Nodes[i].Posted.Before(d.Nodes[j].Posted) })
	reposts, unverified := 0, 0
	for _, f := range d.Nodes {
		reposts += f.Reposts
		if f.Seen != nil && !f.Verified {
			unverified++
		}
	}
	p.Notes = append(p.Notes, fmt.Sprintf("%d nodes failed, %d requests seen; Ready=False posted again %d times (overwritten by a late heartbeat); %d requests appeared while the node no longer showed the condition the bench wrote",
		len(nodes), d.Detected, reposts, unverified))
	return d, nil
}

// simOf is the simulator running a node's kubelet: the management cluster's, or in the fleet world its
// workload cluster's.
func (b *bench) simOf(node string) *nodesim.Simulator {
	if h, ok := b.fleetHost(node); ok {
		return h.sim
	}
	return b.h.Sim
}

// nodesOf is a client of the API server that holds a node.
func (b *bench) nodesOf(node string) kubernetes.Interface {
	if h, ok := b.fleetHost(node); ok {
		return h.kube
	}
	return b.kube
}

// systemOf is the Redfish mock's system of a node's host.
func (b *bench) systemOf(node string) string {
	if h, ok := b.fleetHost(node); ok {
		return h.system
	}
	return harness.SystemID(node)
}

func (b *bench) fleetHost(node string) (fleetHost, bool) {
	if b.fleet == nil {
		return fleetHost{}, false
	}
	h, ok := b.fleet.hosts[node]
	return h, ok
}

// countNearbyBMCRequests sets each failure's BMCRequestsNear from the BMC simulator's record (kept since
// the world started; the power cycles reset it).
func (b *bench) countNearbyBMCRequests(states []*failureState) {
	if b.h.Mock == nil {
		return
	}
	record := b.h.Mock.Requests()
	for _, st := range states {
		st.mu.Lock()
		if !st.f.Expiry.IsZero() {
			from, to := st.f.Expiry.Add(-300*time.Millisecond), st.f.Expiry.Add(100*time.Millisecond)
			i := sort.Search(len(record), func(i int) bool { return !record[i].Time.Before(from) })
			n := 0
			for ; i < len(record) && record[i].Time.Before(to); i++ {
				n++
			}
			st.f.BMCRequestsNear = &n
		}
		st.mu.Unlock()
	}
}

// holdNotReady posts the node's Ready=False condition and makes sure it holds. A heartbeat the simulator
// took on before the hang can still land after the post when the simulator is working through a backlog
// (a busy machine), putting Ready back to True: the bench looks again a second later and posts again,
// with a new transition time, up to three times (Reposts counts them).
func (b *bench) holdNotReady(ctx context.Context, st *failureState, transition time.Time) {
	b.postNotReady(ctx, st, transition)
	for range 3 {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		node, err := b.nodesOf(st.f.Node).CoreV1().Nodes().Get(ctx, st.f.Node, metav1.GetOptions{})
		if err != nil {
			continue
		}
		overwritten := false
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				overwritten = true
			}
		}
		if !overwritten {
			return
		}
		st.mu.Lock()
		st.f.Reposts++
		st.mu.Unlock()
		b.postNotReady(ctx, st, time.Now().Truncate(time.Second))
	}
}

// postNotReady writes the node's Ready=False condition, as a kubelet that finds its container runtime
// down would, with lastTransitionTime transition.
func (b *bench) postNotReady(ctx context.Context, st *failureState, transition time.Time) {
	now := time.Now()
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady",
		Message:           "bench: container runtime is down",
		LastHeartbeatTime: metav1.NewTime(now), LastTransitionTime: metav1.NewTime(transition),
	}}}})
	if err != nil {
		st.setError(err)
		return
	}
	_, err = b.nodesOf(st.f.Node).CoreV1().Nodes().Patch(ctx, st.f.Node, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	posted := time.Now()
	st.mu.Lock()
	defer st.mu.Unlock()
	if err != nil {
		st.f.Error = fmt.Sprintf("posting Ready=False: %v", err)
		return
	}
	st.f.Transition, st.f.Posted, st.f.Expiry = transition, posted, transition.Add(b.cfg.unhealthyDuration)
}

func (st *failureState) setError(err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.f.Error = err.Error()
}

func (st *failureState) get() Failure {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.f
}

// onRemediation is called for each new remediation request the watch sees: it checks that a failed
// node still shows the condition the bench wrote, and heals the node when the bench is the remediator.
func (b *bench) onRemediation(s sighting) {
	b.mu.Lock()
	st, ok := b.active[s.Node]
	b.mu.Unlock()
	if !ok {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		node, err := b.nodesOf(s.Node).CoreV1().Nodes().Get(ctx, s.Node, metav1.GetOptions{})
		if err == nil {
			want := st.get().Transition
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionFalse && c.LastTransitionTime.Time.Equal(want) {
					st.mu.Lock()
					st.f.Verified = true
					st.mu.Unlock()
				}
			}
		}
		if b.benchHeals() {
			if err := b.simOf(s.Node).ClearFault(s.Node); err != nil {
				logf("healing %s: %v", s.Node, err)
			}
		}
	}()
}

// waitRecovered waits until every node is Ready and no remediation request for it exists.
func (b *bench) waitRecovered(ctx context.Context, nodes []string, timeout time.Duration) (bool, error) {
	deadline := time.Now().Add(timeout)
	pending := map[string]bool{}
	for _, n := range nodes {
		pending[n] = true
	}
	for {
		present := b.emrs.present()
		for n := range pending {
			if present[n] {
				continue
			}
			node, err := b.nodesOf(n).CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				continue
			}
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					delete(pending, n)
				}
			}
		}
		if len(pending) == 0 {
			return true, nil
		}
		if time.Now().After(deadline) {
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// forceHeal clears the nodes' faults and powers their hosts on: the next phase starts from a healthy
// fleet whatever the remediator did.
func (b *bench) forceHeal(nodes []string) {
	for _, n := range nodes {
		_ = b.simOf(n).ClearFault(n)
		if st, err := b.h.Mock.PowerState(b.systemOf(n)); err == nil && st != redfishmock.PowerOn {
			_ = b.h.Mock.SetPowerState(b.systemOf(n), redfishmock.PowerOn)
		}
	}
}

// decompose adds the audit log's view to the detection phases: when the controller's first write for
// each failed node (its lease or its request) and its create of the request reached the API server, and
// when the API server had stored the request, all counted from the node's expiry.
func decompose(ds []Detection, reqs []request, emrResource string) {
	type key struct{ resource, namespace, name string }
	first := map[key][]request{} // writes by what they name, in the order received
	for _, r := range reqs {
		if r.write {
			k := key{r.resource, r.namespace, r.name}
			first[k] = append(first[k], r)
		}
	}
	since := func(k key, verb string, t time.Time) *request {
		for i := range first[k] {
			r := &first[k][i]
			if !r.at.Before(t) && (verb == "" || r.verb == verb) {
				return r
			}
		}
		return nil
	}
	ms := func(d time.Duration) *float64 {
		v := float64(d.Microseconds()) / 1000
		return &v
	}
	for i := range ds {
		d := &ds[i]
		var decided, sent, created []float64
		for j := range d.Nodes {
			f := &d.Nodes[j]
			if f.Request == "" || f.Expiry.IsZero() {
				continue
			}
			ns, name, _ := strings.Cut(f.Request, "/")
			// Writes before the failure are another story; a little slack for clock rounding.
			from := f.Posted.Add(-time.Second)
			create := since(key{emrResource, ns, name}, "create", from)
			if create == nil {
				continue
			}
			f.CreateSentMs = ms(create.at.Sub(f.Expiry))
			sent = append(sent, *f.CreateSentMs)
			if create.latency > 0 {
				f.CreatedMs = ms(create.at.Add(create.latency).Sub(f.Expiry))
				created = append(created, *f.CreatedMs)
			}
			dec := create.at
			for _, ln := range []string{leasePrefix + f.Node} {
				for k := range first {
					if k.resource == "leases" && k.name == ln {
						if r := since(k, "", from); r != nil && r.at.Before(dec) {
							dec = r.at
						}
					}
				}
			}
			f.DecidedMs = ms(dec.Sub(f.Expiry))
			decided = append(decided, *f.DecidedMs)
		}
		d.Decided, d.CreateSent, d.Created = stats(decided), stats(sent), stats(created)
	}
}

// leasePrefix names the node maintenance leases (medik8s' convention, which metalheal follows).
const leasePrefix = "node-"
