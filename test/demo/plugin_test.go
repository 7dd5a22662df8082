package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/timeline"
	"github.com/metalheal/metalheal/test/harness"
)

// pluginRun is one run of the kubectl plugin against the demo's world.
type pluginRun struct {
	args           []string
	stdout, stderr string
	exitCode       int
}

// pluginRuns are the plugin's answers, asked once the story has ended, while the world still runs.
type pluginRuns struct {
	timeline, timelineTable, status, statusTable, bmcCheck, bmcCheckTable, wrongPassword pluginRun
	wrongPasswordValue                                                                   string
}

// buildPlugin builds the kubectl plugin binary into a temporary directory.
func buildPlugin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "kubectl-metalheal")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/metalheal/metalheal/cmd/kubectl-metalheal").CombinedOutput()
	if err != nil {
		t.Fatalf("building the plugin: %v\n%s", err, out)
	}
	return bin
}

// askPlugin runs the plugin's commands against the world with the admin's kubeconfig: the timeline of the
// broken node, the status, a BMC check, then a BMC check after its Secret's password was made wrong.
func askPlugin(bin string, runs *pluginRuns) func(ctx context.Context, h *harness.Harness) error {
	return func(ctx context.Context, h *harness.Harness) error {
		run := func(args ...string) pluginRun {
			ctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			args = append(args, "--kubeconfig", h.World.Kubeconfig())
			cmd := exec.CommandContext(ctx, bin, args...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			r := pluginRun{args: args}
			if err := cmd.Run(); err != nil {
				var exit *exec.ExitError
				if !errors.As(err, &exit) {
					r.stderr = err.Error()
					r.exitCode = -1
					return r
				}
				r.exitCode = exit.ExitCode()
			}
			r.stdout, r.stderr = stdout.String(), stderr.String()
			return r
		}
		broken, healthy := harness.NodeName(2), harness.NodeName(1)
		runs.timeline = run("timeline", broken, "-o", "json")
		runs.timelineTable = run("timeline", broken)
		runs.status = run("status", "-o", "json")
		runs.statusTable = run("status")
		runs.bmcCheck = run("bmc", "check", healthy, "-o", "yaml")
		runs.bmcCheckTable = run("bmc", "check", healthy)

		// The healthy node's BMC gets a wrong password (the story is over: nothing depends on it now).
		var bmcs v1alpha1.BMCList
		if err := h.Client.List(ctx, &bmcs, client.InNamespace(harness.Namespace)); err != nil {
			return err
		}
		i := slices.IndexFunc(bmcs.Items, func(b v1alpha1.BMC) bool { return b.Spec.NodeName == healthy })
		if i < 0 {
			return fmt.Errorf("no BMC for %s", healthy)
		}
		secret := &corev1.Secret{}
		if err := h.Client.Get(ctx, client.ObjectKey{Namespace: harness.Namespace, Name: bmcs.Items[i].Spec.CredentialsSecretRef.Name}, secret); err != nil {
			return err
		}
		runs.wrongPasswordValue = "wrong-" + harness.BMCUsername
		secret.Data["password"] = []byte(runs.wrongPasswordValue)
		if err := h.Client.Update(ctx, secret); err != nil {
			return err
		}
		runs.wrongPassword = run("bmc", "check", healthy)
		return nil
	}
}

// checkPlugin asserts on the plugin's answers: the timeline tells the steps the demo told, in its order
// and its words, at the same times since the node went NotReady; the status shows the demo's check at
// rest; the BMC check reads the power, and names a wrong password as a credentials error.
func checkPlugin(t *testing.T, st *story, runs *pluginRuns) {
	g := NewWithT(t)
	for _, r := range []pluginRun{runs.timelineTable, runs.statusTable, runs.bmcCheckTable, runs.wrongPassword} {
		t.Logf("$ kubectl metalheal %v (exit %d)\n%s%s", r.args[:len(r.args)-2], r.exitCode, r.stdout, r.stderr)
	}
	for _, r := range []pluginRun{runs.timeline, runs.timelineTable, runs.status, runs.statusTable, runs.bmcCheck, runs.bmcCheckTable} {
		g.Expect(r.exitCode).To(BeZero(), "%v: %s", r.args, r.stderr)
	}

	// timeline: the demo's steps, in the demo's order and words.
	var tl struct {
		StartedBy string `json:"startedBy"`
		Steps     []struct {
			Since  float64 `json:"sinceSeconds"`
			Step   string  `json:"step"`
			Detail string  `json:"detail"`
		} `json:"steps"`
	}
	g.Expect(json.Unmarshal([]byte(runs.timeline.stdout), &tl)).To(Succeed())
	g.Expect(tl.StartedBy).To(Equal(stepNotReady.String()))
	var got []string
	since := map[string]float64{}
	for _, s := range tl.Steps {
		got = append(got, s.Step)
		since[s.Step] = s.Since
	}
	// What a cluster keeps of a finished remediation: the events of the node lifecycle controller, the
	// check and the remediator (the lease and the taints are gone, their events remain), and the Node's
	// Ready condition. The host's own power was only the BMC simulator's to tell, and the failure is the
	// demo's own doing: the plugin tells every other step the demo told, in the demo's order.
	simulatorOnly := []step{stepInjected, stepHostOff, stepHostOn}
	var printed []string
	for _, e := range st.Timeline() {
		if e.Step != stepNote && !slices.Contains(simulatorOnly, e.Step) && !slices.Contains(printed, e.Label) {
			printed = append(printed, e.Label)
		}
	}
	g.Expect(got).To(ConsistOf(printed), "the demo's steps")
	// In the demo's order, but for steps the demo saw within the same instant (the remediator records the
	// power-off request and cordons the node in two writes a few milliseconds apart; the demo sees them
	// through two watches, in either order): those the plugin tells in the order the remediator makes them.
	demoSeen := st.Seen()
	stepOf := map[string]step{}
	for _, s := range timeline.StorySteps {
		stepOf[s.String()] = s
	}
	for i := range printed {
		for j := i + 1; j < len(printed); j++ {
			if slices.Index(got, printed[i]) < slices.Index(got, printed[j]) {
				continue
			}
			apart := demoSeen[stepOf[printed[j]]] - demoSeen[stepOf[printed[i]]]
			g.Expect(apart).To(BeNumerically("<", 250*time.Millisecond),
				"the plugin tells %s before %s, which the demo saw %s later", printed[j], printed[i], apart)
		}
	}
	var want []string
	for _, s := range storySteps {
		if !slices.Contains(simulatorOnly, s) {
			want = append(want, s.String())
		}
	}
	g.Expect(got).To(Equal(want), "every step of the story")
	// At the same times, counted from the node going NotReady (which the cluster stamps to the second).
	seen := demoSeen
	for _, s := range timeline.StorySteps {
		if at, ok := since[s.String()]; ok {
			demo := (seen[s] - seen[stepNotReady]).Seconds()
			g.Expect(at).To(BeNumerically("~", demo, 1.5), "%s: the plugin says +%.1fs, the demo +%.1fs", s, at, demo)
		}
	}
	// In the demo's words: the remediator's messages, as the demo printed them when it saw each phase.
	demoDetail := map[string]string{}
	for _, e := range st.Timeline() {
		if _, ok := demoDetail[e.Label]; !ok {
			demoDetail[e.Label] = e.Detail
		}
	}
	// (When the demo's watch skipped a phase's own update, it printed the step's default words instead.)
	defaults := map[string]string{stepPoweringOff.String(): timeline.PoweringOffDetail, stepPoweredOff.String(): timeline.PoweredOffDetail,
		stepPoweringOn.String(): timeline.PoweringOnDetail, stepPoweredOn.String(): timeline.PoweredOnDetail, stepNodeReady.String(): ""}
	// The remediator's and the check's events of the lease and the taints say what the demo saw.
	kept := []string{stepLeaseTaken.String(), stepCordoned.String(), stepFenced.String(), stepTaintsRemoved.String(),
		stepLeaseReleased.String()}
	for _, s := range tl.Steps {
		if def, ok := defaults[s.Step]; (ok && demoDetail[s.Step] != def) || slices.Contains(kept, s.Step) {
			g.Expect(s.Detail).To(Equal(demoDetail[s.Step]), s.Step)
		}
	}
	for _, s := range want {
		g.Expect(runs.timelineTable.stdout).To(MatchRegexp(`(?m)^ +\+\d+\.\ds  ` + s + ` `))
	}
	g.Expect(runs.timelineTable.stdout).To(ContainSubstring("Not on record: host off, host on\n"))

	// status: the demo's check at rest, every BMC ready.
	var status struct {
		Checks []struct {
			Kind, Name, Selector, Budget string
			Observed, Healthy            int32
			Storm                        bool
			InFlight                     []string
			Phase                        string
		}
		Remediations []any
		BMCsNotReady []any
	}
	g.Expect(json.Unmarshal([]byte(runs.status.stdout), &status)).To(Succeed())
	g.Expect(status.Checks).To(HaveExactElements(And(
		HaveField("Kind", "NodeHealthCheck"), HaveField("Name", checkName), HaveField("Selector", "node-role.kubernetes.io/worker"),
		HaveField("Observed", int32(3)), HaveField("Healthy", int32(3)), HaveField("Budget", "maxUnhealthy 1"),
		HaveField("Storm", false), HaveField("InFlight", BeEmpty()), HaveField("Phase", "Enabled"))))
	g.Expect(status.Remediations).To(BeEmpty())
	g.Expect(status.BMCsNotReady).To(BeEmpty())
	g.Expect(runs.statusTable.stdout).To(ContainSubstring("NodeHealthCheck/demo"))

	// bmc check: the power read through the manager's driver; a wrong password is a credentials error.
	g.Expect(runs.bmcCheck.stdout).To(ContainSubstring("powerState: \"On\""))
	g.Expect(runs.bmcCheckTable.stdout).To(ContainSubstring("OK: power On; the BMC accepted the credentials"))
	g.Expect(runs.wrongPassword.exitCode).To(Equal(1))
	g.Expect(runs.wrongPassword.stdout).To(ContainSubstring("FAILED (" + v1alpha1.ReasonAuthenticationFailed + "): the BMC rejected the credentials of Secret"))
	for _, r := range []pluginRun{runs.timeline, runs.timelineTable, runs.status, runs.statusTable, runs.bmcCheck, runs.bmcCheckTable, runs.wrongPassword} {
		g.Expect(r.stdout + r.stderr).NotTo(Or(ContainSubstring(harness.BMCPassword), ContainSubstring(runs.wrongPasswordValue)))
	}
}
