package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/metalheal/metalheal/api/v1alpha1"
)

// Installed as kubectl-metalheal on the PATH, the plugin answers `kubectl metalheal --help` (kubectl finds
// plugins by that name). Without kubectl on this machine, the binary is run by the name kubectl would run.
func TestInstalledAsKubectlPlugin(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "kubectl-metalheal")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "%s", out)

	path := dir + string(os.PathListSeparator) + os.Getenv("PATH")
	var cmd *exec.Cmd
	if kubectl, err := exec.LookPath("kubectl"); err == nil {
		cmd = exec.Command(kubectl, "metalheal", "--help")
	} else {
		t.Log("kubectl is not installed: running kubectl-metalheal from the PATH, as kubectl would")
		cmd = exec.Command("kubectl-metalheal", "--help")
		cmd.Path = bin
	}
	cmd.Env = append(os.Environ(), "PATH="+path)
	out, err = cmd.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "%s", out)
	for _, want := range []string{"kubectl metalheal status", "kubectl metalheal timeline NODE", "kubectl metalheal history NODE",
		"kubectl metalheal bmc check NODE",
		"--kubeconfig", "--namespace", "-o, --output"} {
		g.Expect(string(out)).To(ContainSubstring(want))
	}
}

func TestOutputFlag(t *testing.T) {
	tests := map[string]struct {
		args    []string
		wantErr string
	}{
		"an unknown format is refused before the cluster is asked": {args: []string{"status", "-o", "wide"}, wantErr: `--output "wide": must be json or yaml`},
		"timeline needs a node": {args: []string{"timeline"}, wantErr: "accepts 1 arg(s)"},
		"history needs a node":  {args: []string{"history"}, wantErr: "accepts 1 arg(s)"},
		"history's --cluster is NAMESPACE/NAME": {args: []string{"history", "worker-1", "--cluster", "edge-a"},
			wantErr: `--cluster "edge-a": must be NAMESPACE/NAME`},
		"bmc check needs a node": {args: []string{"bmc", "check"}, wantErr: "accepts 1 arg(s)"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			var out, errOut bytes.Buffer
			cmd := newRootCommand(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut},
				clocktesting.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)))
			cmd.SetArgs(tc.args)
			g.Expect(cmd.Execute()).To(MatchError(ContainSubstring(tc.wantErr)))
		})
	}
}

func TestCheckStatus(t *testing.T) {
	tests := map[string]struct {
		check *v1alpha1.NodeHealthCheck
		want  CheckStatus
	}{
		"a storm and two nodes in flight": {
			check: &v1alpha1.NodeHealthCheck{ObjectMeta: metav1.ObjectMeta{Name: "workers"},
				Spec: v1alpha1.NodeHealthCheckSpec{MaxUnhealthy: ptr.To(intstr.FromString("40%")),
					Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}}},
				Status: v1alpha1.NodeHealthCheckStatus{ObservedNodes: ptr.To[int32](5), HealthyNodes: ptr.To[int32](2), Phase: v1alpha1.PhaseEnabled,
					InFlightRemediations: map[string]metav1.Time{"w-2": {}, "w-1": {}},
					Conditions:           []metav1.Condition{{Type: v1alpha1.ConditionStormActive, Status: metav1.ConditionTrue, Message: "3 of 5 unhealthy"}}}},
			want: CheckStatus{Kind: "NodeHealthCheck", Name: "workers", Selector: "pool=a", Observed: ptr.To[int32](5), Healthy: ptr.To[int32](2),
				Budget: "maxUnhealthy 40%", Storm: true, StormMessage: "3 of 5 unhealthy", InFlight: []string{"w-1", "w-2"}, Phase: "Enabled"},
		},
		"minHealthy, no selector, nothing known yet": {
			check: &v1alpha1.NodeHealthCheck{ObjectMeta: metav1.ObjectMeta{Name: "all"},
				Spec: v1alpha1.NodeHealthCheckSpec{MinHealthy: ptr.To(intstr.FromInt32(3))}},
			want: CheckStatus{Kind: "NodeHealthCheck", Name: "all", Selector: "<none>", Budget: "minHealthy 3"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			NewWithT(t).Expect(nhcStatus(tc.check)).To(Equal(tc.want))
		})
	}
}

func TestBMCReadiness(t *testing.T) {
	cond := func(typ string, s metav1.ConditionStatus, reason string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: s, Reason: reason, Message: "m"}
	}
	tests := map[string]struct {
		conds     []metav1.Condition
		wantReady bool
		wantCond  string
	}{
		"reachable with valid credentials": {conds: []metav1.Condition{cond(v1alpha1.ConditionReachable, metav1.ConditionTrue, "OK"),
			cond(v1alpha1.ConditionCredentialsValid, metav1.ConditionTrue, "OK")}, wantReady: true},
		"credentials rejected": {conds: []metav1.Condition{cond(v1alpha1.ConditionReachable, metav1.ConditionTrue, "OK"),
			cond(v1alpha1.ConditionCredentialsValid, metav1.ConditionFalse, v1alpha1.ReasonAuthenticationFailed)}, wantCond: "CredentialsValid=False"},
		"unreachable":     {conds: []metav1.Condition{cond(v1alpha1.ConditionReachable, metav1.ConditionFalse, "BMCUnreachable")}, wantCond: "Reachable=False"},
		"not checked yet": {wantCond: "Reachable=Unknown"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			s, ready := bmcReadiness(&v1alpha1.BMC{Status: v1alpha1.BMCStatus{Conditions: tc.conds}})
			g.Expect(ready).To(Equal(tc.wantReady))
			if !ready {
				g.Expect(s.Condition).To(Equal(tc.wantCond))
			}
		})
	}
}

func TestRedactAddress(t *testing.T) {
	g := NewWithT(t)
	g.Expect(redactAddress("redfish://admin:pw@10.0.0.1/redfish/v1/Systems/1")).To(Equal("redfish://10.0.0.1/redfish/v1/Systems/1"))
	g.Expect(redactAddress("ipmi://10.0.0.1:623")).To(Equal("ipmi://10.0.0.1:623"))
}
