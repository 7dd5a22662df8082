package powerwatch

import (
	"fmt"
	"net"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/pkg/bmc"
)

// trigger is what prompted a reading of the power state.
type trigger string

const (
	// triggerStream: an event on the BMC's event stream.
	triggerStream trigger = "stream"
	// triggerPoll: the poll while no stream is open (and the first reading of a watch).
	triggerPoll trigger = "poll"
)

// describe says in words how the reading came, for the condition's message.
func (t trigger) describe() string {
	if t == triggerStream {
		return "its event stream"
	}
	return "a poll"
}

// action is what a reading leads to.
type action string

const (
	// actNone: nothing to write or say.
	actNone action = ""
	// actRemediating: a metalheal remediation is at work on the host: its own power changes are no news.
	actRemediating action = "Remediating"
	// actPoweredOff: set PoweredOff=True.
	actPoweredOff action = "PoweredOff"
	// actPoweredOn: set PoweredOff=False: the BMC reads On and the kubelet reported since.
	actPoweredOn action = "PoweredOn"
	// actAwaitKubelet: the BMC reads On, but the Node's kubelet has not reported since the host went off:
	// the host is not back yet (it boots, or it hangs); PoweredOff stays True and the watch polls.
	actAwaitKubelet action = "AwaitKubelet"
	// actContradicted: the kubelet answers: warn once, fence nothing.
	actContradicted action = "Contradicted"
	// actUnverifiable: no kubelet endpoint to check the BMC against: warn once, fence nothing.
	actUnverifiable action = "Unverifiable"
)

// kubelet is the second reading: what the probe of the host's kubelet found.
type kubelet int

const (
	// kubeletSilent: the kubelet did not answer (no TCP connection within the probe's bound).
	kubeletSilent kubelet = iota
	// kubeletAnswered: a TCP connection to the kubelet was made: the host runs.
	kubeletAnswered
	// kubeletNoEndpoint: the Node publishes no InternalIP or kubelet port to probe.
	kubeletNoEndpoint
)

// decideOn is what a reading of On means for the Node's condition: a True condition turns False once the
// host is back, powered on and its kubelet Ready by a report made after the condition turned True (until
// then the Node's Ready is the dead kubelet's last word, and a health check would take the host for
// healthy while it boots). A Node whose BMC never reported it off gets no condition at all.
func decideOn(cond *corev1.NodeCondition, ready *corev1.NodeCondition) action {
	switch {
	case cond == nil || cond.Status != corev1.ConditionTrue:
		return actNone
	case ready != nil && ready.Status == corev1.ConditionTrue && ready.LastHeartbeatTime.After(cond.LastTransitionTime.Time):
		return actPoweredOn
	}
	return actAwaitKubelet
}

// alreadyOff reports whether the Node already says what an Off reading would make it say: nothing to
// read again or probe.
func alreadyOff(cond *corev1.NodeCondition) bool {
	return cond != nil && cond.Status == corev1.ConditionTrue
}

// decideOff is what a confirmed Off reading (the BMC read Off twice) means once the kubelet was probed.
// warned is the warning already given in this episode (see watch.warned): a contradiction or an
// unverifiable reading is reported once, not at every reading.
func decideOff(k kubelet, warned action) action {
	var a action
	switch k {
	case kubeletAnswered:
		a = actContradicted
	case kubeletNoEndpoint:
		a = actUnverifiable
	default:
		return actPoweredOff
	}
	if a == warned {
		return actNone
	}
	return a
}

// kubeletEndpoint is where the Node's kubelet listens: its first InternalIP and the port of
// status.daemonEndpoints.kubeletEndpoint; "" when the Node publishes either not.
func kubeletEndpoint(n *corev1.Node) string {
	port := n.Status.DaemonEndpoints.KubeletEndpoint.Port
	if port <= 0 {
		return ""
	}
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP && a.Address != "" {
			return net.JoinHostPort(a.Address, strconv.Itoa(int(port)))
		}
	}
	return ""
}

// poweredOffCondition is PoweredOff=True for a host bmcName reported off at seen (prompted by how) and
// whose kubelet at endpoint did not answer (probeErr, bounded by probeTimeout).
func poweredOffCondition(now, seen time.Time, how trigger, bmcName, endpoint string, probeTimeout time.Duration, probeErr error) corev1.NodeCondition {
	msg := fmt.Sprintf("BMC %s reported the host powered off at %s (%s) and read it off again; the kubelet at %s did not answer within %s",
		bmcName, seen.UTC().Format(time.RFC3339), how.describe(), endpoint, probeTimeout)
	if probeErr != nil {
		msg += fmt.Sprintf(" (%v)", probeErr)
	}
	return corev1.NodeCondition{
		Type: v1alpha1.NodeConditionPoweredOff, Status: corev1.ConditionTrue, Reason: v1alpha1.ReasonBMCReportedOff, Message: msg,
		LastHeartbeatTime: metav1.NewTime(now), LastTransitionTime: metav1.NewTime(now),
	}
}

// poweredOnCondition is PoweredOff=False for a host bmcName reports on at seen, whose kubelet reported
// Ready at readyAt.
func poweredOnCondition(now, seen, readyAt time.Time, how trigger, bmcName string) corev1.NodeCondition {
	return corev1.NodeCondition{
		Type: v1alpha1.NodeConditionPoweredOff, Status: corev1.ConditionFalse, Reason: v1alpha1.ReasonBMCReportedOn,
		Message: fmt.Sprintf("BMC %s reported the host powered on at %s (%s), and its kubelet reported Ready at %s",
			bmcName, seen.UTC().Format(time.RFC3339), how.describe(), readyAt.UTC().Format(time.RFC3339)),
		LastHeartbeatTime: metav1.NewTime(now), LastTransitionTime: metav1.NewTime(now),
	}
}

// readyCondition returns the Node's Ready condition, nil when it has none.
func readyCondition(n *corev1.Node) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// readingResult is the metric label of a reading.
func readingResult(state bmc.PowerState, err error) string {
	if err != nil {
		return "error"
	}
	switch state {
	case bmc.PowerStateOn, bmc.PowerStateOff:
		return string(state)
	}
	return string(bmc.PowerStateUnknown)
}

// poweredOff returns the Node's PoweredOff condition, nil when it has none.
func poweredOff(n *corev1.Node) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == v1alpha1.NodeConditionPoweredOff {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}
