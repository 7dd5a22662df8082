package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/testenv"
	"github.com/metalheal/metalheal/test/harness"
	"github.com/metalheal/metalheal/test/peers"
)

// A checker is one of the health checkers `bench peers` measures side by side (--checker): metalheal's
// two, and the peers' managers as their projects ship them (test/peers), each in the world its kind
// checks. Every one creates the same request kind (metalheal's PowerCycleRemediation, from the same
// template), which nothing remediates: the bench heals a failed node once it sees its request.
type checker struct {
	// name is the --checker value and the name in the tables.
	name string
	// kind is the health check's kind: NodeHealthCheck or MachineHealthCheck.
	kind string
	// peer is the peer's build; nil for metalheal's manager.
	peer *peers.Build
	// machines: the world has a Cluster API Cluster whose kubeconfig Secret is the world's own, and one
	// Machine per Node (machineWorld).
	machines bool
}

var checkers = []checker{
	{name: "metalheal-nhc", kind: "NodeHealthCheck"},
	{name: "medik8s-nhc", kind: "NodeHealthCheck", peer: &peers.Medik8s},
	{name: "metalheal-mhc", kind: "MachineHealthCheck", machines: true},
	{name: "capi-mhc", kind: "MachineHealthCheck", peer: &peers.ClusterAPI, machines: true},
}

// checkerNames lists the --checker values.
func checkerNames() []string {
	names := make([]string, len(checkers))
	for i, c := range checkers {
		names[i] = c.name
	}
	return names
}

func findChecker(name string) (checker, bool) {
	for _, c := range checkers {
		if c.name == name {
			return c, true
		}
	}
	return checker{}, false
}

// The machine world (see machineWorld).
const (
	machineNamespace = "default" // where config/cluster-api lets metalheal read kubeconfig Secrets
	clusterName      = "bench"
	// workloadUser is who the Cluster's kubeconfig Secret authenticates as (system:masters): a user of
	// its own, so that the audit log counts the checker's requests through it as the checker's.
	workloadUser = "bench:workload-cluster"
	// roleLabel selects the worker Machines (the health checks' selector): the control-plane Machine, on
	// the first Node, is not checked.
	roleLabel = "bench.metalheal.io/role"
)

var (
	capiGV       = schema.GroupVersion{Group: "cluster.x-k8s.io", Version: "v1beta2"}
	interopGV    = schema.GroupVersion{Group: "infrastructure.cluster.x-k8s.io", Version: "v1alpha1"}
	medik8sNHCGV = schema.GroupVersion{Group: "remediation.medik8s.io", Version: "v1alpha1"}
)

// interopCRDs are the stand-in infrastructure provider's kinds the interop suite runs Cluster API's real
// flow with (InteropCluster, InteropMachine, InteropMachineTemplate).
func interopCRDs() string {
	return filepath.Join(testenv.RepoRoot(), "test", "e2e-interop", "testdata", "crds", "interop-infrastructure.yaml")
}

// peerSetup is what a checker needs beyond metalheal's world, prepared before the world starts (the CRDs
// go in with it, and the audit policy names the users).
type peerSetup struct {
	manifests   *peers.Manifests // the peer's config/default; nil for metalheal's manager
	pki         *peers.WebhookPKI
	webhookPort int
	user        string // the peer's service account
	namespace   string // where the peer runs
	crdDir      string
}

// prepareChecker loads what the checker's world needs: the peer's manifests (webhooks pointed at a local
// port), the CRDs to install with the world, the users to audit.
func (b *bench) prepareChecker() (*peerSetup, []string, error) {
	c := b.checker
	s := &peerSetup{crdDir: filepath.Join(b.work, "crds")}
	if err := os.MkdirAll(s.crdDir, 0o755); err != nil {
		return nil, nil, err
	}
	users := []string{harness.ManagerUser, peerUser}
	if c.machines {
		users = append(users, workloadUser)
	}
	var err error
	if s.pki, err = peers.NewWebhookPKI(time.Now()); err != nil {
		return nil, nil, err
	}
	load := func(p peers.Build, port int) (*peers.Manifests, error) { return peers.Load(p, port, s.pki.CAPEM) }
	switch {
	case c.peer == &peers.Medik8s:
		if !peers.PortFree(peers.Medik8sWebhookPort) {
			return nil, nil, fmt.Errorf("node-healthcheck-operator serves its webhook on 127.0.0.1:%d, which is taken", peers.Medik8sWebhookPort)
		}
		s.webhookPort = peers.Medik8sWebhookPort
		if s.manifests, err = load(peers.Medik8s, s.webhookPort); err != nil {
			return nil, nil, err
		}
	case c.machines:
		if s.webhookPort, err = peers.FreePort(); err != nil {
			return nil, nil, err
		}
		m, err := load(peers.ClusterAPI, s.webhookPort)
		if err != nil {
			return nil, nil, err
		}
		if c.peer == nil {
			// Cluster API's CRDs without Cluster API: nothing serves their conversion webhooks, and every
			// client here speaks v1beta2.
			for _, crd := range m.CRDs {
				unstructured.RemoveNestedField(crd.Object, "spec", "conversion")
			}
		} else {
			s.manifests = m
		}
		if err := peers.WriteCRDs(s.crdDir, "capi", m.CRDs); err != nil {
			return nil, nil, err
		}
	}
	if s.manifests != nil {
		if s.namespace, s.user, err = peers.RunsAs(s.manifests.Deployment); err != nil {
			return nil, nil, err
		}
		users = append(users, s.user)
	}
	if c.peer == &peers.Medik8s {
		if err := peers.WriteCRDs(s.crdDir, c.peer.Name, s.manifests.CRDs); err != nil {
			return nil, nil, err
		}
	}
	return s, users, nil
}

// extraCRDPaths are the CRDs the checker's world is started with.
func (s *peerSetup) extraCRDPaths(c checker) []string {
	paths := []string{s.crdDir}
	if c.machines {
		paths = append(paths, interopCRDs())
	}
	return paths
}

// startBuiltinPeer installs the peer's RBAC and webhooks as its config/default ships them and runs its
// manager as its service account; it starts the start-up phase.
func (b *bench) startBuiltinPeer(ctx context.Context) error {
	s, p := b.peerSetup, b.checker.peer
	if err := peers.Apply(ctx, b.h.Client, "metalheal-bench", s.manifests.Install); err != nil {
		return err
	}
	u, err := b.h.World.AddUser(s.user, peers.ServiceAccountGroups(s.namespace), nil)
	if err != nil {
		return err
	}
	health, err := peers.FreePort()
	if err != nil {
		return err
	}
	var args, env []string
	if p == &peers.Medik8s {
		tmp := filepath.Join(b.work, "nhc-tmp")
		if err := s.pki.WriteServingCert(peers.Medik8sCertDir(tmp)); err != nil {
			return err
		}
		args, env, err = peers.Medik8sArgs(s.manifests, tmp, health)
	} else {
		certDir := filepath.Join(b.work, "capi-certs")
		if err := s.pki.WriteServingCert(certDir); err != nil {
			return err
		}
		args, env, err = peers.ClusterAPIArgs(s.manifests, certDir, s.webhookPort, health)
	}
	if err != nil {
		return err
	}
	b.track.begin("startup")
	logf("starting %s as %s: %s %s", b.checker.name, s.user, p.BinPath(), strings.Join(args, " "))
	proc, err := peers.Start(ctx, p.Binary, p.BinPath(), u.Kubeconfig, b.work, fmt.Sprintf("http://127.0.0.1:%d/readyz", health), args, env)
	if err != nil {
		return err
	}
	pgid := proc.PID()
	b.ctrl = &controller{
		name: b.checker.name, user: s.user, logPath: proc.LogPath,
		meter:  &meter{name: controllerMeter, pids: processGroup(pgid)},
		stopFn: func() error { return proc.Stop(15 * time.Second) },
	}
	if b.checker.machines {
		b.ctrl.users = []string{workloadUser}
	}
	b.track.add(b.ctrl.meter)
	b.report.Controller = ControllerInfo{Name: b.checker.name, User: s.user, Command: p.BinPath(), Args: args, Log: proc.LogPath}
	return nil
}

// createTemplate creates the PowerCycleRemediationTemplate every checker's requests are made from, in
// namespace.
func (b *bench) createTemplate(ctx context.Context, namespace string) error {
	tpl := &v1alpha1.PowerCycleRemediationTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: checkName, Namespace: namespace},
		Spec:       v1alpha1.PowerCycleRemediationTemplateSpec{Template: v1alpha1.PowerCycleRemediationTemplateResource{Spec: pcrSpec()}},
	}
	if err := b.h.Client.Create(ctx, tpl); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating PowerCycleRemediationTemplate %s/%s: %w", namespace, checkName, err)
	}
	return nil
}

// createCheckerCheck creates the checker's health check over every worker (every worker Machine), with
// the same conditions (Ready False or Unknown for --unhealthy-duration), no budget, and the bench's
// template.
func (b *bench) createCheckerCheck(ctx context.Context) error {
	secs := int64(b.cfg.unhealthyDuration / time.Second)
	tplRef := func(namespace string) map[string]any {
		return map[string]any{"apiVersion": v1alpha1.GroupVersion.String(), "kind": "PowerCycleRemediationTemplate", "name": checkName, "namespace": namespace}
	}
	switch b.checker.name {
	case "metalheal-nhc":
		return b.createCheck(ctx)
	case "medik8s-nhc":
		if err := b.createTemplate(ctx, harness.Namespace); err != nil {
			return err
		}
		nhc := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": medik8sNHCGV.String(), "kind": "NodeHealthCheck", "metadata": map[string]any{"name": checkName},
			"spec": map[string]any{
				"selector": map[string]any{"matchExpressions": []any{map[string]any{"key": "node-role.kubernetes.io/worker", "operator": "Exists"}}},
				"unhealthyConditions": []any{
					map[string]any{"type": "Ready", "status": "False", "duration": b.cfg.unhealthyDuration.String()},
					map[string]any{"type": "Ready", "status": "Unknown", "duration": b.cfg.unhealthyDuration.String()},
				},
				"minHealthy":          int64(0),
				"remediationTemplate": tplRef(harness.Namespace),
			},
		}}
		return b.h.Client.Create(ctx, nhc)
	case "metalheal-mhc":
		if err := b.createTemplate(ctx, machineNamespace); err != nil {
			return err
		}
		d := metav1.Duration{Duration: b.cfg.unhealthyDuration}
		all := intstr.FromString("100%")
		return b.h.Client.Create(ctx, &v1alpha1.MachineHealthCheck{
			ObjectMeta: metav1.ObjectMeta{Namespace: machineNamespace, Name: checkName},
			Spec: v1alpha1.MachineHealthCheckSpec{
				ClusterName: clusterName,
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
	case "capi-mhc":
		if err := b.createTemplate(ctx, machineNamespace); err != nil {
			return err
		}
		ref := tplRef(machineNamespace)
		delete(ref, "namespace")
		return b.h.Client.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": capiGV.String(), "kind": "MachineHealthCheck",
			"metadata": map[string]any{"name": checkName, "namespace": machineNamespace},
			"spec": map[string]any{
				"clusterName": clusterName,
				"selector":    map[string]any{"matchLabels": map[string]any{roleLabel: "worker"}},
				"checks": map[string]any{"unhealthyNodeConditions": []any{
					map[string]any{"type": "Ready", "status": "False", "timeoutSeconds": secs},
					map[string]any{"type": "Ready", "status": "Unknown", "timeoutSeconds": secs},
				}},
				"remediation": map[string]any{"templateRef": ref},
			},
		}})
	}
	return fmt.Errorf("unknown checker %q", b.checker.name)
}

// machineWorld makes the world a Cluster API workload cluster of itself, as the interop suite does: a
// Cluster whose kubeconfig Secret holds a kubeconfig of this very API server (for workloadUser), a stand-in
// infrastructure cluster, a MachineSet controlling one Machine per worker Node (named after it, with the
// Node's providerID on its infrastructure machine), the first Node's Machine a control-plane Machine.
// With Cluster API running, its own controllers take it from there (each Machine's nodeRef found by the
// providerID, the Cluster initialised once the control-plane Machine has its Node); without, the bench
// writes the nodeRefs.
func (b *bench) machineWorld(ctx context.Context) error {
	start := time.Now()
	u, err := b.h.World.AddUser(workloadUser, []string{"system:masters"}, nil)
	if err != nil {
		return err
	}
	kubeconfig, err := os.ReadFile(u.Kubeconfig)
	if err != nil {
		return err
	}
	host, port, err := apiEndpoint(b.h.World.RESTConfig().Host)
	if err != nil {
		return err
	}
	c := b.h.Client
	obj := func(gv schema.GroupVersion, kind, name string, spec map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": gv.String(), "kind": kind,
			"metadata": map[string]any{"name": name, "namespace": machineNamespace}, "spec": spec}}
	}
	infraCluster := obj(interopGV, "InteropCluster", clusterName, map[string]any{"controlPlaneEndpoint": map[string]any{"host": host, "port": int64(port)}})
	infraCluster.Object["status"] = map[string]any{"initialization": map[string]any{"provisioned": true}}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: machineNamespace, Name: clusterName + "-kubeconfig",
			Labels: map[string]string{"cluster.x-k8s.io/cluster-name": clusterName}},
		Type: "cluster.x-k8s.io/secret",
		Data: map[string][]byte{"value": kubeconfig},
	}
	cluster := obj(capiGV, "Cluster", clusterName, map[string]any{"infrastructureRef": map[string]any{
		"apiGroup": interopGV.Group, "kind": "InteropCluster", "name": clusterName}})
	workerLabels := map[string]any{"cluster.x-k8s.io/cluster-name": clusterName, roleLabel: "worker"}
	tpl := obj(interopGV, "InteropMachineTemplate", "workers", map[string]any{"template": map[string]any{"spec": map[string]any{}}})
	set := obj(capiGV, "MachineSet", "workers", map[string]any{
		"clusterName": clusterName,
		"replicas":    int64(b.cfg.nodes - 1),
		"selector":    map[string]any{"matchLabels": workerLabels},
		"template": map[string]any{
			"metadata": map[string]any{"labels": workerLabels},
			"spec": map[string]any{"clusterName": clusterName, "bootstrap": map[string]any{"dataSecretName": "bootstrap-workers"},
				"infrastructureRef": map[string]any{"apiGroup": interopGV.Group, "kind": "InteropMachineTemplate", "name": "workers"}},
		},
	})
	for _, o := range []client.Object{secret, infraCluster, cluster, tpl, set} {
		if err := c.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %s %s: %w", o.GetObjectKind().GroupVersionKind().Kind, o.GetName(), err)
		}
	}
	owner := map[string]any{"apiVersion": capiGV.String(), "kind": "MachineSet", "name": set.GetName(), "uid": string(set.GetUID()),
		"controller": true, "blockOwnerDeletion": true}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i := 1; i <= b.cfg.nodes; i++ {
		node := harness.NodeName(i)
		g.Go(func() error { return b.machineFor(gctx, node, i == 1, owner) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	logf("machine world: Cluster %s/%s, %d Machines (one control plane) in %.0fs", machineNamespace, clusterName, b.cfg.nodes, time.Since(start).Seconds())
	return nil
}

// machineFor gives a Node its Machine: the Node's providerID, a provisioned infrastructure machine with
// it, the Machine (named after the Node) and its nodeRef.
func (b *bench) machineFor(ctx context.Context, node string, controlPlane bool, owner map[string]any) error {
	providerID := "bench://" + node
	patch := []byte(fmt.Sprintf(`{"spec":{"providerID":%q}}`, providerID))
	if err := b.h.Client.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("node %s: %w", node, err)
	}
	infra := &unstructured.Unstructured{Object: map[string]any{"apiVersion": interopGV.String(), "kind": "InteropMachine",
		"metadata": map[string]any{"name": node, "namespace": machineNamespace},
		"spec":     map[string]any{"providerID": providerID},
		"status":   map[string]any{"initialization": map[string]any{"provisioned": true}}}}
	labels := map[string]any{"cluster.x-k8s.io/cluster-name": clusterName}
	meta := map[string]any{"name": node, "namespace": machineNamespace, "labels": labels}
	if controlPlane {
		labels["cluster.x-k8s.io/control-plane"] = ""
	} else {
		labels[roleLabel] = "worker"
		meta["ownerReferences"] = []any{owner}
	}
	m := &unstructured.Unstructured{Object: map[string]any{"apiVersion": capiGV.String(), "kind": "Machine", "metadata": meta,
		"spec": map[string]any{"clusterName": clusterName, "providerID": providerID,
			"bootstrap":         map[string]any{"dataSecretName": "bootstrap-" + node},
			"infrastructureRef": map[string]any{"apiGroup": interopGV.Group, "kind": "InteropMachine", "name": node}}}}
	for _, o := range []*unstructured.Unstructured{infra, m} {
		if err := b.h.Client.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %s %s: %w", o.GetKind(), node, err)
		}
	}
	// The Machine's Node, written by the bench for either check, as for metalheal's (where no Machine
	// controller runs): with Cluster API's, its Machine controller finds every Node by its providerID
	// itself, but at 1,000 Machines on two cores it had not within the 10 minutes of the start-up bound
	// (975 of 999 seen healthy), and how soon a Machine controller links Nodes is not what is compared.
	// It keeps a nodeRef it finds.
	ref := []byte(fmt.Sprintf(`{"status":{"nodeRef":{"name":%q}}}`, node))
	if err := b.h.Client.Status().Patch(ctx, m, client.RawPatch(types.MergePatchType, ref)); err != nil {
		return fmt.Errorf("Machine %s nodeRef: %w", node, err)
	}
	return nil
}

// apiEndpoint splits the API server's URL into host and port.
func apiEndpoint(raw string) (string, int, error) {
	rest := raw[strings.Index(raw, "://")+3:]
	host, port, ok := strings.Cut(strings.TrimSuffix(rest, "/"), ":")
	if !ok {
		return "", 0, fmt.Errorf("API server %q has no port", raw)
	}
	p, err := strconv.Atoi(port)
	return host, p, err
}

// checkerReady reports, from the check's status, whether it has seen every target healthy ("" when it
// has, else what it shows).
func (b *bench) checkerReady(ctx context.Context) string {
	want := int64(b.cfg.nodes)
	var gvk schema.GroupVersionKind
	key := client.ObjectKey{Name: checkName}
	observed, healthy := "observedNodes", "healthyNodes"
	switch b.checker.name {
	case "metalheal-nhc":
		gvk = v1alpha1.GroupVersion.WithKind("NodeHealthCheck")
	case "medik8s-nhc":
		gvk = medik8sNHCGV.WithKind("NodeHealthCheck")
	case "metalheal-mhc":
		gvk, key.Namespace, observed, healthy, want = v1alpha1.GroupVersion.WithKind("MachineHealthCheck"), machineNamespace, "expectedMachines", "currentHealthy", want-1
	case "capi-mhc":
		gvk, key.Namespace, observed, healthy, want = capiGV.WithKind("MachineHealthCheck"), machineNamespace, "expectedMachines", "currentHealthy", want-1
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	if err := b.h.Client.Get(ctx, key, u); err != nil {
		return err.Error()
	}
	o, _, _ := unstructured.NestedInt64(u.Object, "status", observed)
	h, _, _ := unstructured.NestedInt64(u.Object, "status", healthy)
	if o != want || h != want {
		return fmt.Sprintf("%s %s: %s %d, %s %d of %d", gvk.Kind, checkName, observed, o, healthy, h, want)
	}
	return ""
}

// waitCheckerReady waits until the check has seen every target healthy.
func (b *bench) waitCheckerReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.startupTimeout)
	defer cancel()
	last := ""
	for {
		if last = b.checkerReady(ctx); last == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s to see every target healthy (last: %s): %w", b.checker.name, last, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// metalhealManagerArgs are the flags metalheal's manager runs with for a checker: only that checker's
// controller (the peers cannot be split, metalheal's manager can), and for Machines the flags
// config/cluster-api's Deployment carries.
func (c checker) metalhealManagerArgs() []string {
	if c.machines {
		return []string{"--controllers=machinehealthcheck", "--cluster-namespaces=" + machineNamespace, "--remediation-namespaces=" + machineNamespace}
	}
	return []string{"--controllers=nodehealthcheck"}
}
