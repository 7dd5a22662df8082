package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PowerState is a host's power state as its BMC reports it.
// +kubebuilder:validation:Enum=On;Off;Unknown
type PowerState string

const (
	// PowerOn: the host is powered on.
	PowerOn PowerState = "On"
	// PowerOff: the host is powered off, as confirmed by its BMC.
	PowerOff PowerState = "Off"
	// PowerUnknown: the BMC could not be read, or reported a transitional state.
	PowerUnknown PowerState = "Unknown"
)

// SecretReference names a Secret in the BMC's own namespace.
type SecretReference struct {
	// name of the Secret. It must hold the keys username and password.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
}

// CABundleKind is the kind of object a CA bundle reference names.
// +kubebuilder:validation:Enum=Secret;ConfigMap
type CABundleKind string

const (
	// CABundleSecret: the bundle is a key of a Secret.
	CABundleSecret CABundleKind = "Secret"
	// CABundleConfigMap: the bundle is a key of a ConfigMap (data or binaryData).
	CABundleConfigMap CABundleKind = "ConfigMap"
)

// DefaultCABundleKey is the key a CA bundle reference reads when it names none (cert-manager's name for
// the CA of a certificate Secret).
const DefaultCABundleKey = "ca.crt"

// CABundleReference names the Secret or ConfigMap, in the BMC's own namespace, holding the PEM-encoded
// certificates of the certificate authorities a BMC's certificate is verified against.
type CABundleReference struct {
	// kind is Secret or ConfigMap.
	// +required
	Kind CABundleKind `json:"kind"`

	// name of the Secret or ConfigMap, in the BMC's namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`

	// key of the Secret's or ConfigMap's data holding the PEM bundle (ca.crt when omitted).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[-._a-zA-Z0-9]+$')",message="key must consist of alphanumeric characters, '-', '_' or '.', like ca.crt"
	Key string `json:"key,omitempty"`
}

// KeyOrDefault is the key to read: Key, or DefaultCABundleKey when it is empty.
func (r CABundleReference) KeyOrDefault() string {
	if r.Key == "" {
		return DefaultCABundleKey
	}
	return r.Key
}

// Condition reasons of a BMC whose CA bundle or certificate is the problem (Reachable=False; BMCReady on
// the remediations of its node).
const (
	// ReasonCABundleNotFound: the Secret or ConfigMap spec.caBundleRef names, or its key, does not exist.
	ReasonCABundleNotFound = "CABundleNotFound"
	// ReasonCABundleInvalid: the bundle holds no PEM certificate, or one that does not parse.
	ReasonCABundleInvalid = "CABundleInvalid"
	// ReasonCertificateVerificationFailed: the BMC's TLS certificate was not signed by a trusted
	// authority, or does not name the address's host.
	ReasonCertificateVerificationFailed = "CertificateVerificationFailed"
)

// ClusterReference names a Cluster API Cluster.
type ClusterReference struct {
	// namespace of the Cluster.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace"`

	// name of the Cluster.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
}

// BMCSpec says how to reach one host's baseboard management controller.
// +kubebuilder:validation:XValidation:rule="!has(self.caBundleRef) || !has(self.disableCertificateVerification) || !self.disableCertificateVerification",message="caBundleRef and disableCertificateVerification: true exclude each other: a CA bundle is for verifying the BMC's certificate; remove one of them"
type BMCSpec struct {
	// nodeName is the Node this BMC powers. One BMC per node.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	NodeName string `json:"nodeName"`

	// cluster names the Cluster API Cluster, in this (the management) cluster, whose workload cluster
	// holds the Node nodeName: for a host whose Node is not one of the cluster the manager runs in. Node
	// names repeat across clusters (two clusters' worker-0 are two hosts, with two BMCs): a BMC without
	// cluster powers only the Node of that name in this cluster, one with cluster only that cluster's.
	// +optional
	Cluster *ClusterReference `json:"cluster,omitempty"`

	// address is the BMC's URL, in metal3's conventions:
	// redfish://host[:port]/redfish/v1/Systems/ID (also redfish+http, redfish+https, idrac-redfish,
	// ilo5-redfish; https unless the scheme says http), ipmi://host[:port] (port 623 by default; a bare
	// host or host:port also means IPMI), or ironic://host:6385/NODE-UUID (ironic+https for TLS).
	// IPv6 hosts go in brackets: redfish://[fd00::5]/redfish/v1/Systems/1. A hostname is looked up as
	// written, as an absolute name, never under the cluster's DNS search domains; a final dot
	// (bmc-7.example.com.) may be written and changes nothing.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="!self.contains('://') || self.matches('^(redfish|redfish\\\\+http|redfish\\\\+https|idrac-redfish|idrac-redfish\\\\+http|idrac-redfish\\\\+https|ilo5-redfish|ilo5-redfish\\\\+http|ilo5-redfish\\\\+https|ipmi|ironic|ironic\\\\+http|ironic\\\\+https)://')",message="address scheme must be one of redfish, redfish+http, redfish+https, idrac-redfish, ilo5-redfish, ipmi, ironic, ironic+https"
	// +kubebuilder:validation:XValidation:rule="!self.contains('://') || self.matches('^[a-z0-9+-]+://(\\\\[[0-9A-Fa-f:.]+\\\\]|[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?\\\\.?)(:[0-9]{1,5})?(/.*)?$')",message="address must name a host, e.g. redfish://10.0.0.5/redfish/v1/Systems/1 or ipmi://bmc-7.example.com:623"
	// +kubebuilder:validation:XValidation:rule="self.contains('://') || self.matches('^(\\\\[[0-9A-Fa-f:.]+\\\\]|[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?\\\\.?)(:[0-9]{1,5})?$')",message="an address without a scheme must be an IPMI host or host:port, e.g. 10.0.0.5 or 10.0.0.5:623"
	Address string `json:"address"`

	// credentialsSecretRef names the Secret, in this namespace, holding the keys username and password.
	// +required
	CredentialsSecretRef SecretReference `json:"credentialsSecretRef"`

	// disableCertificateVerification skips TLS verification of the BMC's certificate (self-signed BMC
	// certificates are common). Certificates are verified unless this is true.
	// +optional
	DisableCertificateVerification bool `json:"disableCertificateVerification,omitempty"`

	// caBundleRef names the Secret or ConfigMap, in this namespace, whose key (ca.crt by default) holds
	// the PEM certificates of the authorities that signed the BMC's certificate: a site's private CA. The
	// BMC's certificate is then verified against these authorities only, instead of the system's. It
	// applies to Redfish and Ironic over HTTPS; IPMI has no certificates. Excludes
	// disableCertificateVerification.
	// +optional
	CABundleRef *CABundleReference `json:"caBundleRef,omitempty"`

	// powerWatch, when set, has the manager watch the host's power through this BMC between remediations:
	// a host its BMC reports off while no metalheal remediation is at work on it, and whose kubelet does
	// not answer either, gets the Node condition PoweredOff=True (reason BMCReportedOff), which a health
	// check may list among its unhealthy conditions to fence the host at once. Absent: not watched.
	// BMCs of one node pool usually share it (one kustomize patch or Helm value).
	// +optional
	PowerWatch *PowerWatch `json:"powerWatch,omitempty"`
}

// PowerWatchEventStream says whether the power watch follows the BMC's event stream.
// +kubebuilder:validation:Enum=Auto;Disabled
type PowerWatchEventStream string

const (
	// PowerWatchEventStreamAuto follows the BMC's event stream when it offers one (Redfish Server-Sent
	// Events), and polls while none is open.
	PowerWatchEventStreamAuto PowerWatchEventStream = "Auto"
	// PowerWatchEventStreamDisabled only polls.
	PowerWatchEventStreamDisabled PowerWatchEventStream = "Disabled"
)

// Bounds and default of PowerWatch.PollIntervalSeconds.
const (
	DefaultPowerWatchPollIntervalSeconds = 30
	MinPowerWatchPollIntervalSeconds     = 5
	MaxPowerWatchPollIntervalSeconds     = 3600
)

// PowerWatch is how the manager follows a host's power through its BMC (BMC spec.powerWatch).
type PowerWatch struct {
	// eventStream is Auto (the default: follow the BMC's event stream, Redfish Server-Sent Events, when it
	// offers one, and poll while none is open) or Disabled (only poll).
	// +optional
	// +kubebuilder:default=Auto
	EventStream PowerWatchEventStream `json:"eventStream,omitempty"`

	// pollIntervalSeconds is how often the host's power state is read while no event stream is open:
	// always for IPMI, Ironic and Redfish BMCs without an event stream, and while a dropped stream is being
	// opened again. 5 to 3600; defaults to 30. A power loss is seen within it.
	// +optional
	// +kubebuilder:default=30
	// +kubebuilder:validation:Minimum=5
	// +kubebuilder:validation:Maximum=3600
	// +kubebuilder:validation:XValidation:rule="self >= 5 && self <= 3600",message="pollIntervalSeconds is how often the power is read while no event stream is open: from 5 to 3600 seconds (30 by default)"
	PollIntervalSeconds int32 `json:"pollIntervalSeconds,omitempty"`
}

// PollInterval is pollIntervalSeconds as a duration, DefaultPowerWatchPollIntervalSeconds when unset.
func (w PowerWatch) PollInterval() time.Duration {
	if w.PollIntervalSeconds <= 0 {
		return DefaultPowerWatchPollIntervalSeconds * time.Second
	}
	return time.Duration(w.PollIntervalSeconds) * time.Second
}

// StreamEnabled reports whether the BMC's event stream is followed (Auto, or unset).
func (w PowerWatch) StreamEnabled() bool { return w.EventStream != PowerWatchEventStreamDisabled }

// BMCStatus is what the last check of the BMC found.
type BMCStatus struct {
	// powerState is the host's power state as last read.
	// +optional
	PowerState PowerState `json:"powerState,omitempty"`

	// lastChecked is when a check last wrote this status. A check that finds nothing new (same
	// conditions, power state and observedGeneration) writes nothing, except to refresh lastChecked once
	// it is 30 minutes old (or one check interval, if that is longer): on a healthy BMC it can thus lag
	// the last check by that much plus up to 1.5 check intervals.
	// +optional
	LastChecked *metav1.Time `json:"lastChecked,omitempty"`

	// observedGeneration is the generation of the spec this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Reachable (the BMC answers) and CredentialsValid (it accepts the credentials).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// recentRemediations are the last remediations of this BMC's host that ended, oldest first (at most
	// 10; the oldest is dropped): which request, started and finished when, the power changes made and how
	// it ended. The power-cycle remediator adds one when a request of the host lets go of it (its finalizer
	// is removed), once per request, so the record outlives the request and its events. Remediations by
	// other remediators are not recorded here.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10
	RecentRemediations []RemediationRecord `json:"recentRemediations,omitempty"`
}

// BMC is one host's baseboard management controller: where it is and which Secret holds its
// credentials. metalheal checks every BMC periodically, so a misconfigured one is reported before the
// node it guards fails.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=bmcs,singular=bmc,categories=metalheal
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.cluster.name`
// +kubebuilder:printcolumn:name="Power",type=string,JSONPath=`.status.powerState`
// +kubebuilder:printcolumn:name="Reachable",type=string,JSONPath=`.status.conditions[?(@.type=="Reachable")].status`
// +kubebuilder:printcolumn:name="Credentials",type=string,JSONPath=`.status.conditions[?(@.type=="CredentialsValid")].status`
// +kubebuilder:printcolumn:name="Address",type=string,JSONPath=`.spec.address`,priority=1
// +kubebuilder:printcolumn:name="Checked",type=date,JSONPath=`.status.lastChecked`
// +kubebuilder:printcolumn:name="Last-Remediation",type=date,JSONPath=`.status.recentRemediations[-1:].finished`
// +kubebuilder:printcolumn:name="Result",type=string,JSONPath=`.status.recentRemediations[-1:].result`
type BMC struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is where the BMC is and how to log in.
	// +required
	Spec BMCSpec `json:"spec"`

	// status is what the last check found.
	// +optional
	Status BMCStatus `json:"status,omitempty"`
}

// BMCList is a list of BMCs.
// +kubebuilder:object:root=true
type BMCList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BMC `json:"items"`
}
