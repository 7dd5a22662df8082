package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// RemediationBackoff slows down the remediation of a target (a Node, or a Machine) that keeps failing
// again after its remediations: once after remediations of the target started within window, the next
// one waits initial after the last one started, doubling with every further remediation in the window,
// at most max. Escalation steps of one remediation count once. after: 0 turns it off.
// +kubebuilder:validation:XValidation:rule="!has(self.initial) || !has(self.max) || !self.initial.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') || !self.max.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self.initial) <= duration(self.max)",message="remediationBackoff.initial must not exceed remediationBackoff.max"
// +kubebuilder:validation:XValidation:rule="!has(self.after) || self.after == 0 || !has(self.initial) || !self.initial.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self.initial) > duration('0s')",message="remediationBackoff.initial must be more than 0s unless after is 0 (off)"
// +kubebuilder:validation:XValidation:rule="!has(self.after) || self.after == 0 || !has(self.window) || !self.window.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') || duration(self.window) > duration('0s')",message="remediationBackoff.window must be more than 0s unless after is 0 (off)"
type RemediationBackoff struct {
	// after is how many remediations of a target within window start without waiting; the next ones
	// wait. 0 turns the back-off off. Defaults to 3.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10
	After *int32 `json:"after,omitempty"`

	// window is how far back remediations count, e.g. 6h. Defaults to 6h.
	// +optional
	// +kubebuilder:default="6h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$')",message="must be a duration such as 300s, 5m or 1h30m (a number and a unit: ns, us, ms, s, m, h; never negative)"
	Window *metav1.Duration `json:"window,omitempty"`

	// initial is the first wait, counted from the start of the last remediation; each further remediation
	// in the window doubles it. Defaults to 15m.
	// +optional
	// +kubebuilder:default="15m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$')",message="must be a duration such as 300s, 5m or 1h30m (a number and a unit: ns, us, ms, s, m, h; never negative)"
	Initial *metav1.Duration `json:"initial,omitempty"`

	// max bounds the wait. Defaults to 2h.
	// +optional
	// +kubebuilder:default="2h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$')",message="must be a duration such as 300s, 5m or 1h30m (a number and a unit: ns, us, ms, s, m, h; never negative)"
	Max *metav1.Duration `json:"max,omitempty"`
}

// RecentRemediation is a target (a Node, or a Machine) whose remediation started within the back-off's
// window: the memory of spec.remediationBackoff.
type RecentRemediation struct {
	// name is the target's name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// starts are when the target's remediations within the window started (the first request of each),
	// oldest first.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Starts []metav1.Time `json:"starts,omitempty"`

	// backoffUntil is when the back-off's hold on the target's next remediation ends; set while the target
	// is unhealthy and held back.
	// +optional
	BackoffUntil *metav1.Time `json:"backoffUntil,omitempty"`
}
