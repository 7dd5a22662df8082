package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/testenv"
)

// Yesterday's remediation of worker-1, long after its events expired and its request was deleted: the
// timeline tells it from the record on the host's BMC, and history lists it; a same-named Node's host of
// another cluster, with a record of its own, is not mixed in. Once events of the same remediation are
// there too, each step is told once, in the events' words. Against a real API server, through the
// command line.
func TestTimelineAndHistoryFromTheBMCsRecord(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	env, cfg, err := testenv.Start(testenv.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	g.Expect(os.WriteFile(kubeconfig, env.KubeConfig, 0o600)).To(Succeed())
	scheme := runtime.NewScheme()
	g.Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	g.Expect(v1alpha1.AddToScheme(scheme)).To(Succeed())
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: defaultManagerNamespace}})).To(Succeed())

	started := time.Now().Add(-24 * time.Hour).Truncate(time.Second).UTC()
	tm := func(s int) metav1.Time { return metav1.NewTime(started.Add(time.Duration(s) * time.Second)) }
	ptm := func(s int) *metav1.Time { t := tm(s); return &t }

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "worker-1"}}
	g.Expect(c.Create(ctx, node)).To(Succeed())
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		Message: "kubelet is posting ready status", LastTransitionTime: tm(40), LastHeartbeatTime: metav1.Now()}}
	g.Expect(c.Status().Update(ctx, node)).To(Succeed())

	bmcFor := func(name string, cluster *v1alpha1.ClusterReference, rec v1alpha1.RemediationRecord) {
		b := &v1alpha1.BMC{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: defaultManagerNamespace},
			Spec: v1alpha1.BMCSpec{NodeName: "worker-1", Cluster: cluster, Address: "redfish://10.0.0.5/redfish/v1/Systems/1",
				CredentialsSecretRef: v1alpha1.SecretReference{Name: "bmc-credentials"}}}
		g.Expect(c.Create(ctx, b)).To(Succeed())
		b.Status.RecentRemediations = []v1alpha1.RemediationRecord{rec}
		g.Expect(c.Status().Update(ctx, b)).To(Succeed())
	}
	bmcFor("worker-1", nil, v1alpha1.RemediationRecord{Kind: "PowerCycleRemediation", Namespace: defaultManagerNamespace,
		Name: "worker-1", UID: "9d2c", NodeName: "worker-1", Strategy: v1alpha1.StrategyReboot,
		HealthCheck: &v1alpha1.HealthCheckReference{APIVersion: v1alpha1.GroupVersion.String(), Kind: "NodeHealthCheck", Name: "workers"},
		Started:     tm(0), Finished: tm(41), Result: v1alpha1.RemediationSucceeded, Reason: v1alpha1.ReasonNodeReady, Attempts: 1,
		PowerChanges: []v1alpha1.PowerChange{
			{Target: v1alpha1.PowerOff, Requested: tm(1), Confirmed: ptm(3)},
			{Target: v1alpha1.PowerOn, Requested: tm(4), Confirmed: ptm(6)},
		},
		Message: "Node worker-1 is Ready again after 1 attempt(s)"})
	bmcFor("edge-a-worker-1", &v1alpha1.ClusterReference{Namespace: "fleet", Name: "edge-a"}, v1alpha1.RemediationRecord{
		Kind: "PowerCycleRemediation", Namespace: "fleet", Name: "edge-a-md-0-x", UID: "77aa", NodeName: "worker-1", ClusterName: "edge-a",
		Started: tm(-3600), Finished: tm(-3500), Result: v1alpha1.RemediationFailed, Reason: v1alpha1.ReasonRetriesExhausted,
		Message: "edge-a's host"})

	run := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		cmd := newRootCommand(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut},
			clocktesting.NewFakeClock(time.Now()))
		cmd.SetArgs(append(args, "--kubeconfig", kubeconfig))
		NewWithT(t).Expect(cmd.Execute()).To(Succeed(), "%s", errOut.String())
		return out.String()
	}

	out := run("timeline", "worker-1")
	t.Logf("kubectl metalheal timeline worker-1, the events expired:\n%s", out)
	g.Expect(out).To(HavePrefix("Timeline of node worker-1 (times since the failure was first recorded: EMR created at " +
		started.Format(time.RFC3339) + ")\n"))
	g.Expect(lines(out)).To(ContainElements(
		"    +0.0s  EMR created            PowerCycleRemediation metalheal-system/worker-1, by NodeHealthCheck workers (as recorded on the host's BMC)",
		"    +1.0s  powering off           powering the host off through its BMC",
		"    +3.0s  power-off confirmed    the BMC reads Off",
		"    +4.0s  powering on            powering the host on",
		"    +6.0s  power-on confirmed     the BMC reads On; waiting for the node",
		"   +40.0s  node Ready             Ready=True (KubeletReady): kubelet is posting ready status",
		"   +41.0s  remediation succeeded  Node worker-1 is Ready again after 1 attempt(s)",
	))
	g.Expect(out).NotTo(ContainSubstring("edge-a"))

	out = run("history", "worker-1")
	t.Logf("kubectl metalheal history worker-1:\n%s", out)
	g.Expect(out).To(ContainSubstring("as BMC metalheal-system/worker-1 records them (the last 10 are kept)"))
	g.Expect(out).To(MatchRegexp(`%s\s+41s\s+Succeeded\s+NodeReady\s+1\s+metalheal-system/worker-1\s+NodeHealthCheck/workers\s+off %s, on %s\s+Node worker-1 is Ready again`,
		started.Format(time.RFC3339), tm(3).UTC().Format(time.TimeOnly), tm(6).UTC().Format(time.TimeOnly)))
	g.Expect(out).NotTo(ContainSubstring("edge-a"))
	var h HistoryOutput
	g.Expect(json.Unmarshal([]byte(run("history", "worker-1", "--cluster", "fleet/edge-a", "-o", "json")), &h)).To(Succeed())
	g.Expect(h.BMCs).To(Equal([]string{"metalheal-system/edge-a-worker-1"}))
	g.Expect(h.Remediations).To(HaveLen(1))
	g.Expect(h.Remediations[0].Result).To(Equal(v1alpha1.RemediationFailed))

	// The remediator's events of the same remediation, still there: each step once, in their words.
	for i, e := range []struct {
		reason string
		at     int
	}{{"PoweringOff", 1}, {"Remediated", 41}} {
		g.Expect(c.Create(ctx, &eventsv1.Event{
			ObjectMeta: metav1.ObjectMeta{Namespace: defaultManagerNamespace, Name: "worker-1.e" + string(rune('0'+i))},
			EventTime:  metav1.NewMicroTime(started.Add(time.Duration(e.at)*time.Second + 300*time.Millisecond)),
			Regarding:  corev1.ObjectReference{Kind: "PowerCycleRemediation", Namespace: defaultManagerNamespace, Name: "worker-1"},
			Reason:     e.reason, Note: "the remediator's words for " + e.reason, Type: corev1.EventTypeNormal, Action: "PowerCycle",
			ReportingController: "metalheal.io/powercycleremediation", ReportingInstance: "manager-1",
		})).To(Succeed())
	}
	out = run("timeline", "worker-1")
	t.Logf("kubectl metalheal timeline worker-1, with the remediator's events:\n%s", out)
	g.Expect(strings.Count(out, "powering off ")).To(Equal(1))
	g.Expect(strings.Count(out, "remediation succeeded")).To(Equal(1))
	g.Expect(lines(out)).To(ContainElements(
		"    +1.3s  powering off           the remediator's words for PoweringOff",
		"   +41.3s  remediation succeeded  the remediator's words for Remediated",
	))
}

func lines(s string) []string { return strings.Split(strings.TrimRight(s, "\n"), "\n") }
