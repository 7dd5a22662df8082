package gates

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/pkg/leases"
)

// Storm is the StormActive decision of one reconcile.
type Storm struct {
	// Reason is v1alpha1.ReasonTooManyUnhealthy while the budget is exceeded, v1alpha1.ReasonStormCooldown
	// during the cooldown after it, "" when there is no storm.
	Reason string
	// Message says so for humans (and for the hold on every target).
	Message string
	// Until is when the cooldown ends (zero outside a cooldown): look again then.
	Until time.Time
	// Began, Cooled and Ended tell which transition this reconcile makes, for the event: the budget was
	// just exceeded, the cooldown just began, the storm just ended.
	Began, Cooled, Ended bool
}

// Active reports whether the storm holds new remediations back.
func (s Storm) Active() bool { return s.Reason != "" }

// EvaluateStorm decides StormActive from the previous conditions (prev), whether the budget is exceeded
// now, and the cooldown. allowedSince is when RemediationAllowed last became True (its transition time as
// just set: now if it became True this reconcile): the cooldown runs from there.
func EvaluateStorm(prev []metav1.Condition, exceeded bool, budgetMessage string, allowedSince time.Time, cooldown time.Duration,
	now time.Time) Storm {
	was := meta.FindStatusCondition(prev, v1alpha1.ConditionStormActive)
	wasStorm := was != nil && was.Status == metav1.ConditionTrue
	var s Storm
	switch {
	case exceeded:
		s.Reason, s.Message = v1alpha1.ReasonTooManyUnhealthy, "Remediation short-circuited: "+budgetMessage
	case wasStorm && cooldown > 0:
		if allowedSince.IsZero() {
			allowedSince = now
		}
		if until := allowedSince.Add(cooldown); now.Before(until) {
			s.Reason, s.Until = v1alpha1.ReasonStormCooldown, until
			s.Message = fmt.Sprintf("The storm is over; remediation resumes at %s (stormCooldownDuration)", until.UTC().Format(time.RFC3339))
		}
	}
	changed := !wasStorm || was.Reason != s.Reason
	s.Began = s.Reason == v1alpha1.ReasonTooManyUnhealthy && changed
	s.Cooled = s.Reason == v1alpha1.ReasonStormCooldown && changed
	s.Ended = s.Reason == "" && wasStorm
	return s
}

// Condition is the StormActive condition the storm calls for.
func (s Storm) Condition(generation int64, now time.Time) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionStormActive, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonNoStorm,
		Message: "No remediation storm", ObservedGeneration: generation, LastTransitionTime: metav1.NewTime(now)}
	if s.Active() {
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, s.Reason, s.Message
	}
	return c
}

// Lease is who holds a node lease and until when, as the cache shows it.
type Lease struct {
	Holder string
	Until  time.Time
}

// ValidAt reports whether someone holds the lease at now (valid up to and including Until).
func (l Lease) ValidAt(now time.Time) bool {
	return l.Holder != "" && !l.Until.IsZero() && !now.After(l.Until)
}

// HeldByOther reports whether someone other than self validly holds the lease at now: the Node is handed
// off, and retryAt is when to look again (a second after it runs out).
func (l Lease) HeldByOther(self string, now time.Time) (retryAt time.Time, held bool) {
	if l.Holder == self || !l.ValidAt(now) {
		return time.Time{}, false
	}
	return l.Until.Add(time.Second), true
}

// HeldMessage is the skip message of a Node whose lease someone else holds.
func (l Lease) HeldMessage() string { return fmt.Sprintf("The node's lease is held by %q", l.Holder) }

// KeepLease decides what a check (self) does with the lease of a Node it is remediating: renew it once
// half of it has run out, retake it when it is missing or expired, take it over from the remediator of one
// of its own requests (from) that took it first. It returns whether to write the lease now, else when to
// look again (zero: never, someone else took it and the running remediation is not interrupted).
func KeepLease(l Lease, self string, from []string, duration time.Duration, now time.Time) (write bool, at time.Time) {
	if !l.ValidAt(now) {
		return true, time.Time{}
	}
	switch {
	case l.Holder == self:
		if renewAt := l.Until.Add(-duration / 2); now.Before(renewAt) {
			return false, renewAt
		}
		return true, time.Time{}
	case slices.Contains(from, l.Holder):
		return true, time.Time{}
	}
	return false, time.Time{}
}

// Release lists the Nodes whose lease self holds but no longer needs (keep says which it needs), sorted.
func Release(held map[string]Lease, self string, keep func(node string) bool) []string {
	var out []string
	for node, l := range held {
		if l.Holder == self && !keep(node) {
			out = append(out, node)
		}
	}
	slices.Sort(out)
	return out
}

// Control-plane role labels: Nodes with either are remediated one at a time.
const (
	LabelControlPlane = "node-role.kubernetes.io/control-plane"
	LabelMaster       = "node-role.kubernetes.io/master"
)

// IsControlPlane reports whether a Node's labels give it a control-plane role.
func IsControlPlane(nodeLabels map[string]string) bool {
	_, cp := nodeLabels[LabelControlPlane]
	_, master := nodeLabels[LabelMaster]
	return cp || master
}

// ControlPlaneBusy applies the one-at-a-time rule to a control-plane target: it returns the first (sorted)
// busy target other than name, "" when name may start. busy holds the control-plane targets being
// remediated by any check, or held by anyone's lease.
func ControlPlaneBusy(busy map[string]bool, name string) string {
	others := make([]string, 0, len(busy))
	for n := range busy {
		if n != name {
			others = append(others, n)
		}
	}
	if len(others) == 0 {
		return ""
	}
	slices.Sort(others)
	return others[0]
}

// ControlPlaneBusyMessage is the skip message of a control-plane target held back by other.
func ControlPlaneBusyMessage(kind, other string) string {
	return fmt.Sprintf("Control-plane %s %s is being remediated or is held by someone else: one control-plane node at a time", kind, other)
}

// ExcludedMessage is the skip message of a target whose Node carries the exclusion label.
func ExcludedMessage() string {
	return fmt.Sprintf("Node carries %s=true", v1alpha1.LabelExcludeFromRemediation)
}

// Contender is a health check as the overlapping rule sees it.
type Contender struct {
	Name    string
	Created time.Time
	// Remediating: it is remediating the target now (it keeps it).
	Remediating bool
	// Claims: it selects the target and finds it unhealthy.
	Claims bool
}

// Owner applies the overlapping rule for self over one target: a check already remediating the target
// keeps it; otherwise the oldest check (creation time, then name) that claims it owns it. It returns ""
// when self owns the target (self is taken to claim it), else the owner's name.
func Owner(self Contender, peers []Contender) string {
	if self.Remediating {
		return ""
	}
	for _, p := range peers {
		if p.Remediating {
			return p.Name
		}
	}
	best := self
	for _, p := range peers {
		if p.Claims && Older(p.Created, p.Name, best.Created, best.Name) {
			best = p
		}
	}
	if best.Name == self.Name && best.Created.Equal(self.Created) {
		return ""
	}
	return best.Name
}

// OwnedMessage is the skip message of the rule, the same whichever half applied, so that the decision is
// reported once. kind is the owner's kind, target the target's ("node", "Machine").
func OwnedMessage(kind, owner, target string) string {
	return fmt.Sprintf("%s %s owns this %s (the check already remediating a %s keeps it, "+
		"else the oldest check that selects it and finds it unhealthy)", kind, owner, target, target)
}

// Older orders checks by creation time, then name.
func Older(aCreated time.Time, aName string, bCreated time.Time, bName string) bool {
	if !aCreated.Equal(bCreated) {
		return aCreated.Before(bCreated)
	}
	return aName < bName
}

// ListLeases reads the node leases (medik8s' "node-<name>" Leases) in namespace, by Node name: who holds
// each and until when. reader is the cache for a decision, the API server where a decision must be
// confirmed (ControlPlaneClaim).
func ListLeases(ctx context.Context, reader client.Reader, namespace string) (map[string]Lease, error) {
	var list coordinationv1.LeaseList
	if err := reader.List(ctx, &list, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing the node leases in %s: %w", namespace, err)
	}
	out := make(map[string]Lease, len(list.Items))
	for i := range list.Items {
		l := &list.Items[i]
		node, ok := strings.CutPrefix(l.Name, leases.LeaseName(""))
		if !ok || node == "" {
			continue
		}
		until, _ := leases.ValidUntil(l, time.Time{})
		info := Lease{Until: until}
		if l.Spec.HolderIdentity != nil {
			info.Holder = *l.Spec.HolderIdentity
		}
		out[node] = info
	}
	return out, nil
}
