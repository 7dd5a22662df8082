package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
)

// Status is what `status` shows: every health check, the remediations under way and the BMCs not ready.
type Status struct {
	Checks       []CheckStatus       `json:"checks"`
	Remediations []RemediationStatus `json:"remediations"`
	BMCsNotReady []BMCStatus         `json:"bmcsNotReady"`
	// Unreadable lists what the user's credentials may not read (the rest is shown).
	Unreadable []string `json:"unreadable,omitempty"`
}

// CheckStatus is one NodeHealthCheck or MachineHealthCheck.
type CheckStatus struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	// Selector is the pool: the label selector of the nodes or machines it checks.
	Selector string `json:"selector"`
	Observed *int32 `json:"observed,omitempty"`
	Healthy  *int32 `json:"healthy,omitempty"`
	// Budget is how many may be remediated at once: maxUnhealthy, minHealthy or unhealthyRange.
	Budget string `json:"budget"`
	// Storm says whether a storm (too many unhealthy at once) holds remediation back, and why.
	Storm        bool   `json:"storm"`
	StormMessage string `json:"stormMessage,omitempty"`
	// InFlight are the targets (nodes or machines) being remediated.
	InFlight []string `json:"inFlight,omitempty"`
	// Phase is the check's phase (NodeHealthCheck) or "Enabled"/"Disabled"; Reason says why.
	Phase  string `json:"phase,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// RemediationStatus is one PowerCycleRemediation.
type RemediationStatus struct {
	Namespace string                   `json:"namespace"`
	Name      string                   `json:"name"`
	Node      string                   `json:"node,omitempty"`
	Phase     v1alpha1.PowerCyclePhase `json:"phase,omitempty"`
	Attempts  int                      `json:"attempts"`
	Age       string                   `json:"age"`
	Message   string                   `json:"message,omitempty"`
}

// BMCStatus is one BMC that is not reachable or whose credentials are not valid.
type BMCStatus struct {
	Namespace  string `json:"namespace"`
	Name       string `json:"name"`
	Node       string `json:"node"`
	PowerState string `json:"powerState,omitempty"`
	// Condition is the first condition that is not True (Reachable, CredentialsValid), with its reason.
	Condition string `json:"condition"`
	Reason    string `json:"reason,omitempty"`
	Message   string `json:"message,omitempty"`
}

func newStatusCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Health checks with their pools, budgets, storms and in-flight remediations; remediations; BMCs not ready",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			st, err := readStatus(cmd.Context(), c, o.clock.Now())
			if err != nil {
				return err
			}
			return o.print(st, st.table)
		},
	}
}

// readStatus reads every check, remediation and BMC the user may list. A kind the user may not list (or
// that is not installed) is named in Unreadable; any other error fails.
func readStatus(ctx context.Context, c client.Reader, now time.Time) (*Status, error) {
	st := &Status{Checks: []CheckStatus{}, Remediations: []RemediationStatus{}, BMCsNotReady: []BMCStatus{}}
	list := func(l client.ObjectList, what string) (bool, error) {
		err := c.List(ctx, l)
		switch {
		case err == nil:
			return true, nil
		case apierrors.IsForbidden(err) || apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
			st.Unreadable = append(st.Unreadable, fmt.Sprintf("%s: %v", what, err))
			return false, nil
		}
		return false, fmt.Errorf("listing %s: %w", what, err)
	}
	var nhcs v1alpha1.NodeHealthCheckList
	if ok, err := list(&nhcs, "NodeHealthChecks"); err != nil {
		return nil, err
	} else if ok {
		for _, h := range nhcs.Items {
			st.Checks = append(st.Checks, nhcStatus(&h))
		}
	}
	var mhcs v1alpha1.MachineHealthCheckList
	if ok, err := list(&mhcs, "MachineHealthChecks"); err != nil {
		return nil, err
	} else if ok {
		for _, h := range mhcs.Items {
			st.Checks = append(st.Checks, mhcStatus(&h))
		}
	}
	var pcrs v1alpha1.PowerCycleRemediationList
	if ok, err := list(&pcrs, "PowerCycleRemediations"); err != nil {
		return nil, err
	} else if ok {
		for _, p := range pcrs.Items {
			msg := ""
			if cnd := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionProcessing); cnd != nil {
				msg = cnd.Message
			}
			st.Remediations = append(st.Remediations, RemediationStatus{Namespace: p.Namespace, Name: p.Name,
				Node: p.Status.NodeName, Phase: p.Status.Phase, Attempts: len(p.Status.Attempts),
				Age: now.Sub(p.CreationTimestamp.Time).Truncate(time.Second).String(), Message: msg})
		}
	}
	var bmcs v1alpha1.BMCList
	if ok, err := list(&bmcs, "BMCs"); err != nil {
		return nil, err
	} else if ok {
		for _, b := range bmcs.Items {
			if s, ready := bmcReadiness(&b); !ready {
				st.BMCsNotReady = append(st.BMCsNotReady, s)
			}
		}
	}
	return st, nil
}

func nhcStatus(h *v1alpha1.NodeHealthCheck) CheckStatus {
	s := CheckStatus{Kind: "NodeHealthCheck", Name: h.Name, Selector: selectorString(h.Spec.Selector),
		Observed: h.Status.ObservedNodes, Healthy: h.Status.HealthyNodes, Phase: string(h.Status.Phase), Reason: h.Status.Reason}
	switch {
	case h.Spec.MinHealthy != nil:
		s.Budget = "minHealthy " + h.Spec.MinHealthy.String()
	case h.Spec.MaxUnhealthy != nil:
		s.Budget = "maxUnhealthy " + h.Spec.MaxUnhealthy.String()
	default:
		s.Budget = "unlimited"
	}
	if c := meta.FindStatusCondition(h.Status.Conditions, v1alpha1.ConditionStormActive); c != nil && c.Status == metav1.ConditionTrue {
		s.Storm, s.StormMessage = true, c.Message
	}
	for node := range h.Status.InFlightRemediations {
		s.InFlight = append(s.InFlight, node)
	}
	slices.Sort(s.InFlight)
	return s
}

func mhcStatus(h *v1alpha1.MachineHealthCheck) CheckStatus {
	s := CheckStatus{Kind: "MachineHealthCheck", Namespace: h.Namespace, Name: h.Name, Selector: selectorString(&h.Spec.Selector),
		Observed: h.Status.ExpectedMachines, Healthy: h.Status.CurrentHealthy, Phase: "Enabled"}
	switch {
	case h.Spec.UnhealthyRange != "":
		s.Budget = "unhealthyRange " + h.Spec.UnhealthyRange
	case h.Spec.MaxUnhealthy != nil:
		s.Budget = "maxUnhealthy " + h.Spec.MaxUnhealthy.String()
	default:
		s.Budget = "maxUnhealthy 100%"
	}
	if a := h.Status.RemediationsAllowed; a != nil {
		s.Budget += fmt.Sprintf(" (%d allowed now)", *a)
	}
	// Cluster API's short-circuit is its storm: too many unhealthy machines, no remediation.
	if c := meta.FindStatusCondition(h.Status.Conditions, v1alpha1.ConditionRemediationAllowed); c != nil && c.Status == metav1.ConditionFalse {
		s.Storm, s.StormMessage = true, c.Message
	}
	if c := meta.FindStatusCondition(h.Status.Conditions, v1alpha1.ConditionDisabled); c != nil && c.Status == metav1.ConditionTrue {
		s.Phase, s.Reason = "Disabled", c.Reason
	}
	for _, m := range h.Status.UnhealthyMachines {
		if len(m.Remediations) > 0 {
			s.InFlight = append(s.InFlight, m.Name)
		}
	}
	return s
}

func selectorString(sel *metav1.LabelSelector) string {
	if sel == nil {
		return "<none>"
	}
	return metav1.FormatLabelSelector(sel)
}

// bmcReadiness reports a BMC's first condition among Reachable and CredentialsValid that is not True.
func bmcReadiness(b *v1alpha1.BMC) (BMCStatus, bool) {
	s := BMCStatus{Namespace: b.Namespace, Name: b.Name, Node: b.Spec.NodeName, PowerState: string(b.Status.PowerState)}
	for _, t := range []string{v1alpha1.ConditionReachable, v1alpha1.ConditionCredentialsValid} {
		c := meta.FindStatusCondition(b.Status.Conditions, t)
		if c == nil {
			s.Condition, s.Reason, s.Message = t+"=Unknown", "NotChecked", "not checked yet"
			return s, false
		}
		if c.Status != metav1.ConditionTrue {
			s.Condition, s.Reason, s.Message = t+"="+string(c.Status), c.Reason, c.Message
			return s, false
		}
	}
	return s, true
}

func (st *Status) table(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tPOOL\tNODES\tHEALTHY\tBUDGET\tSTORM\tIN FLIGHT\tPHASE")
	for _, c := range st.Checks {
		name := c.Kind + "/" + c.Name
		if c.Namespace != "" {
			name = c.Kind + "/" + c.Namespace + "/" + c.Name
		}
		storm := "no"
		if c.Storm {
			storm = "yes: " + c.StormMessage
		}
		phase := c.Phase
		if c.Reason != "" {
			phase += " (" + c.Reason + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, c.Selector, count(c.Observed), count(c.Healthy), c.Budget,
			storm, fmt.Sprintf("%d %s", len(c.InFlight), strings.Join(c.InFlight, ",")), orDash(phase))
	}
	if len(st.Checks) == 0 {
		fmt.Fprintln(tw, "(no health checks)")
	}
	fmt.Fprintln(tw, "\nREMEDIATION\tNODE\tPHASE\tATTEMPTS\tAGE\tMESSAGE")
	for _, r := range st.Remediations {
		fmt.Fprintf(tw, "%s/%s\t%s\t%s\t%d\t%s\t%s\n", r.Namespace, r.Name, orDash(r.Node), orDash(string(r.Phase)), r.Attempts, r.Age, orDash(r.Message))
	}
	if len(st.Remediations) == 0 {
		fmt.Fprintln(tw, "(none in flight)")
	}
	fmt.Fprintln(tw, "\nBMC NOT READY\tNODE\tPOWER\tCONDITION\tREASON\tMESSAGE")
	for _, b := range st.BMCsNotReady {
		fmt.Fprintf(tw, "%s/%s\t%s\t%s\t%s\t%s\t%s\n", b.Namespace, b.Name, b.Node, orDash(b.PowerState), b.Condition, orDash(b.Reason), orDash(b.Message))
	}
	if len(st.BMCsNotReady) == 0 {
		fmt.Fprintln(tw, "(every BMC is reachable with valid credentials)")
	}
	for _, u := range st.Unreadable {
		fmt.Fprintf(tw, "\nnot shown: %s\n", u)
	}
	return tw.Flush()
}

func count(n *int32) string {
	if n == nil {
		return "-"
	}
	return fmt.Sprint(ptr.Deref(n, 0))
}
