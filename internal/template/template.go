package template

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Annotations and labels shared by health checkers and remediators.
const (
	// AnnotationNodeName names the Node an EMR remediates.
	AnnotationNodeName = "remediation.medik8s.io/node-name"
	// AnnotationTemplateName names the template an EMR was made from.
	AnnotationTemplateName = "remediation.medik8s.io/template-name"
	// AnnotationClonedFromName is Cluster API's record of the template's name.
	AnnotationClonedFromName = "cluster.x-k8s.io/cloned-from-name"
	// AnnotationClonedFromGroupKind is Cluster API's record of the template's group and kind, as
	// "Kind.group", e.g. "PowerCycleRemediationTemplate.remediation.metalheal.io".
	AnnotationClonedFromGroupKind = "cluster.x-k8s.io/cloned-from-groupkind"
	// AnnotationTimedOut marks an EMR the checker gave up on, with the time in RFC 3339. The remediator
	// must stop and clean up.
	AnnotationTimedOut = "remediation.medik8s.io/nhc-timed-out"
	// LabelClusterName is Cluster API's label naming the cluster an object belongs to (in the object's
	// namespace).
	LabelClusterName = "cluster.x-k8s.io/cluster-name"
	// LabelControlPlane marks the request of a control-plane target (value ""), as medik8s'
	// NodeHealthCheck marks it, so that a remediator written for medik8s finds what it expects (its
	// remediators treat a control-plane node more carefully).
	LabelControlPlane = "remediation.medik8s.io/isControlPlaneNode"
	// LabelExcludeFromRemediation set to "true" on a Node keeps it from ever being remediated.
	LabelExcludeFromRemediation = "remediation.medik8s.io/exclude-from-remediation"
)

// Condition types a remediator sets on its EMR and the checker reads back.
const (
	// ConditionProcessing is True while the remediator is working on the EMR.
	ConditionProcessing = "Processing"
	// ConditionSucceeded is True when remediation is done, False when the remediator gave up (the
	// checker then escalates to its next template).
	ConditionSucceeded = "Succeeded"
	// ConditionPermanentNodeDeletionExpected is True when the remediation will delete the Node for good.
	ConditionPermanentNodeDeletionExpected = "PermanentNodeDeletionExpected"
)

// templateSuffix ends every template kind.
const templateSuffix = "Template"

// InvalidTemplateError reports a template that cannot be instantiated.
type InvalidTemplateError struct {
	// Template identifies the template as "Kind namespace/name".
	Template string
	// Reason says what is wrong with it.
	Reason string
}

func (e *InvalidTemplateError) Error() string {
	return fmt.Sprintf("invalid remediation template %s: %s", e.Template, e.Reason)
}

// InvalidInputError reports a caller mistake: an empty name or an incomplete owner reference.
type InvalidInputError struct {
	Reason string
}

func (e *InvalidInputError) Error() string {
	return "invalid remediation request input: " + e.Reason
}

// Request describes the EMR to build.
type Request struct {
	// Template is the remediation template object, of any kind ending in "Template".
	Template *unstructured.Unstructured
	// Name is the EMR's name: the Machine's (MHC) or the Node's (NHC) for the first step, see
	// RequestName.
	Name string
	// NodeName is the Node being remediated; empty when not known (a Machine without a Node), in which
	// case AnnotationNodeName is not set.
	NodeName string
	// Target is the Machine or Node; the EMR gets a non-controller owner reference to it.
	Target metav1.OwnerReference
	// HealthCheck is the MachineHealthCheck or NodeHealthCheck asking for the remediation; the EMR gets a
	// non-controller owner reference to it.
	HealthCheck metav1.OwnerReference
	// ClusterName is the Cluster API cluster of the target Machine (its spec.clusterName), empty for a
	// Node. The EMR is labelled LabelClusterName with it, as Cluster API labels what it clones, so that
	// whoever reads the request learns which cluster its Node is in.
	ClusterName string
	// ControlPlane: the target is a control-plane Node or Machine; the EMR is labelled LabelControlPlane.
	ControlPlane bool
}

// RemediationGVK returns the EMR kind a template kind produces: the same group and version, the kind
// without its "Template" suffix. It is how a checker knows which kind to watch before it has an EMR.
func RemediationGVK(templateGVK schema.GroupVersionKind) (schema.GroupVersionKind, error) {
	kind, err := remediationKind(templateGVK.Kind)
	if err != nil {
		return schema.GroupVersionKind{}, &InvalidTemplateError{Template: templateGVK.Kind, Reason: err.Error()}
	}
	return templateGVK.GroupVersion().WithKind(kind), nil
}

func remediationKind(templateKind string) (string, error) {
	kind, ok := strings.CutSuffix(templateKind, templateSuffix)
	if !ok || kind == "" {
		return "", fmt.Errorf("kind %q does not end in %q", templateKind, templateSuffix)
	}
	return kind, nil
}

// Instantiate builds the EMR for req. The template is not modified.
func Instantiate(req Request) (*unstructured.Unstructured, error) {
	if err := validate(req); err != nil {
		return nil, err
	}
	tpl := req.Template
	id := fmt.Sprintf("%s %s/%s", tpl.GetKind(), tpl.GetNamespace(), tpl.GetName())

	kind, err := remediationKind(tpl.GetKind())
	if err != nil {
		return nil, &InvalidTemplateError{Template: id, Reason: err.Error()}
	}
	inner, found, err := unstructured.NestedMap(tpl.Object, "spec", "template")
	if err != nil {
		return nil, &InvalidTemplateError{Template: id, Reason: "spec.template is not an object"}
	}
	if !found {
		return nil, &InvalidTemplateError{Template: id, Reason: "spec.template is missing"}
	}

	emr := &unstructured.Unstructured{Object: map[string]any{}}
	if spec, ok := inner["spec"]; ok {
		if _, isMap := spec.(map[string]any); !isMap {
			return nil, &InvalidTemplateError{Template: id, Reason: "spec.template.spec is not an object"}
		}
		emr.Object["spec"] = spec // NestedMap returned a deep copy.
	}
	labels, _, err := unstructured.NestedStringMap(inner, "metadata", "labels")
	if err != nil {
		return nil, &InvalidTemplateError{Template: id, Reason: "spec.template.metadata.labels is not a map of strings"}
	}
	annotations, _, err := unstructured.NestedStringMap(inner, "metadata", "annotations")
	if err != nil {
		return nil, &InvalidTemplateError{Template: id, Reason: "spec.template.metadata.annotations is not a map of strings"}
	}

	emr.SetAPIVersion(tpl.GetAPIVersion())
	emr.SetKind(kind)
	emr.SetName(req.Name)
	emr.SetNamespace(tpl.GetNamespace())
	if req.ClusterName != "" {
		if labels == nil {
			labels = map[string]string{}
		}
		labels[LabelClusterName] = req.ClusterName
	}
	if req.ControlPlane {
		if labels == nil {
			labels = map[string]string{}
		}
		labels[LabelControlPlane] = ""
	}
	if len(labels) > 0 {
		emr.SetLabels(labels)
	}
	if annotations == nil {
		annotations = map[string]string{}
	}
	if req.NodeName != "" {
		annotations[AnnotationNodeName] = req.NodeName
	}
	annotations[AnnotationTemplateName] = tpl.GetName()
	annotations[AnnotationClonedFromName] = tpl.GetName()
	annotations[AnnotationClonedFromGroupKind] = tpl.GroupVersionKind().GroupKind().String()
	emr.SetAnnotations(annotations)
	emr.SetOwnerReferences([]metav1.OwnerReference{ownerRef(req.Target), ownerRef(req.HealthCheck)})
	return emr, nil
}

func validate(req Request) error {
	if req.Template == nil {
		return &InvalidInputError{Reason: "no template"}
	}
	if req.Name == "" {
		return &InvalidInputError{Reason: "empty name"}
	}
	for what, ref := range map[string]metav1.OwnerReference{"target": req.Target, "health check": req.HealthCheck} {
		if ref.APIVersion == "" || ref.Kind == "" || ref.Name == "" || ref.UID == "" {
			return &InvalidInputError{Reason: fmt.Sprintf("%s owner reference needs apiVersion, kind, name and uid", what)}
		}
	}
	return nil
}

// ownerRef copies ref without controller or blockOwnerDeletion: the EMR is owned, not controlled.
func ownerRef(ref metav1.OwnerReference) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: ref.APIVersion, Kind: ref.Kind, Name: ref.Name, UID: ref.UID}
}

// FindCondition returns the condition of type condType from obj's status.conditions, or nil if there is
// none. It returns an error when status.conditions is not a list of conditions.
func FindCondition(obj *unstructured.Unstructured, condType string) (*metav1.Condition, error) {
	list, found, err := unstructured.NestedSlice(obj.Object, "status", "conditions")
	if err != nil {
		return nil, fmt.Errorf("reading status.conditions of %s %s/%s: %w", obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
	}
	if !found {
		return nil, nil
	}
	for _, item := range list {
		m, ok := item.(map[string]any)
		if !ok || m["type"] != condType {
			continue
		}
		var c metav1.Condition
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &c); err != nil {
			return nil, fmt.Errorf("decoding condition %s of %s %s/%s: %w", condType, obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
		}
		return &c, nil
	}
	return nil, nil
}

// MarkTimedOut sets AnnotationTimedOut on obj to at, in RFC 3339, unless it is already set.
func MarkTimedOut(obj metav1.Object, at time.Time) {
	annotations := obj.GetAnnotations()
	if _, ok := annotations[AnnotationTimedOut]; ok {
		return
	}
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[AnnotationTimedOut] = at.UTC().Format(time.RFC3339)
	obj.SetAnnotations(annotations)
}

// TimedOut reports whether obj carries AnnotationTimedOut and when it timed out. A value that is not
// RFC 3339 still counts as timed out (the remediator must stop either way); the error says why the time
// is zero.
func TimedOut(obj metav1.Object) (at time.Time, timedOut bool, err error) {
	v, ok := obj.GetAnnotations()[AnnotationTimedOut]
	if !ok {
		return time.Time{}, false, nil
	}
	at, err = time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, true, fmt.Errorf("annotation %s=%q: %w", AnnotationTimedOut, v, err)
	}
	return at, true, nil
}
