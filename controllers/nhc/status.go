package nhc

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/metalheal/metalheal/api/v1alpha1"
)

// maxReasonLength is the API's bound on status.reason.
const maxReasonLength = 1024

// status builds the check's status from the plan, once execute has recorded what it created. It lists only
// the Nodes the check is remediating or skips for a reason of their own, so a 5,000-node check at rest
// has a status of a few hundred bytes. LastUpdateTime is left as it was; the caller stamps it when
// something else changed.
func (p *plan) status(check *v1alpha1.NodeHealthCheck) v1alpha1.NodeHealthCheckStatus {
	st := v1alpha1.NodeHealthCheckStatus{
		ObservedNodes:      ptr.To(int32(p.Observed)),
		HealthyNodes:       ptr.To(int32(p.Observed - p.Failing)), // what the budget counts as healthy
		ObservedGeneration: check.Generation,
		LastUpdateTime:     check.Status.LastUpdateTime,
		Conditions:         p.Conditions,
		RecentRemediations: p.recentRemediations(check),
	}
	names := make([]string, 0, len(p.Entries))
	for name, e := range p.Entries {
		if len(e.Remediations) > 0 || e.SkipReason != "" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		e := p.Entries[name]
		st.UnhealthyNodes = append(st.UnhealthyNodes, *e)
		if len(e.Remediations) > 0 {
			if st.InFlightRemediations == nil {
				st.InFlightRemediations = map[string]metav1.Time{}
			}
			st.InFlightRemediations[name] = e.Remediations[0].Started
		}
	}

	skipped := len(names) - len(st.InFlightRemediations)
	switch {
	case p.Disabled != nil:
		st.Phase, st.Reason = v1alpha1.PhaseDisabled, p.Disabled.Message
	case len(p.Paused) > 0:
		st.Phase, st.Reason = v1alpha1.PhasePaused, "No new remediation starts: paused by "+strings.Join(p.Paused, "; ")
	case len(st.InFlightRemediations) > 0:
		st.Phase, st.Reason = v1alpha1.PhaseRemediating, fmt.Sprintf("Remediating %d node(s)", len(st.InFlightRemediations))
		if p.Hold != "" {
			st.Reason += "; " + p.Hold
		}
	default:
		st.Phase = v1alpha1.PhaseEnabled
		switch {
		case p.Hold != "":
			st.Reason = p.Hold
		case skipped > 0:
			st.Reason = fmt.Sprintf("%d unhealthy node(s) skipped: see unhealthyNodes", skipped)
		case p.Unhealthy > 0:
			st.Reason = fmt.Sprintf("%d of %d node(s) unhealthy", p.Unhealthy, p.Observed)
		default:
			st.Reason = fmt.Sprintf("All %d selected node(s) are healthy", p.Observed)
		}
	}
	if len(st.Reason) > maxReasonLength {
		st.Reason = st.Reason[:maxReasonLength-3] + "..."
	}
	return st
}
