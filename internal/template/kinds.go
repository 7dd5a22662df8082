package template

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"

	v1alpha1 "github.com/metalheal/metalheal/api/v1alpha1"
)

// MaxRemediationKinds is how many distinct remediation kinds one health check may name across its steps.
// Every kind a check names is watched, cluster-wide, by the manager shared by every check: the bound
// keeps one check from making it hold many. A remediator's escalation uses one or two kinds.
const MaxRemediationKinds = 3

// clusterAPICoreGroup is Cluster API's own group (Machines, MachineSets, Clusters, ...).
const clusterAPICoreGroup = "cluster.x-k8s.io"

// RefusedKindError says why a kind a health check names is not accepted as a remediation kind. Nothing of
// it is watched or read.
type RefusedKindError struct {
	// GVK is the remediation kind, or the template kind; empty when the check names too many kinds.
	GVK schema.GroupVersionKind
	// Reason says why, in words the check's author can act on.
	Reason string
}

func (e *RefusedKindError) Error() string {
	if e.GVK.Empty() {
		return "Remediation kinds refused: " + e.Reason
	}
	return fmt.Sprintf("Kind %s (%s) is not a remediation kind: %s", e.GVK.Kind, e.GVK.GroupVersion(), e.Reason)
}

// CheckRemediationKind refuses a remediation kind (or its template kind) that cannot be a remediator's
// external remediation request, before anything of it is watched: the kind is the template's kind minus
// "Template", and whoever may write a check names the template, so without this a check could make the
// manager cache every object of a kind it reads for itself (Nodes, Machines) or any other built-in kind.
//
// A remediation kind is served by a remediator's CustomResourceDefinition. Refused are:
//   - built-in Kubernetes kinds: the core group, groups without a dot (apps, batch, ...) and the
//     *.k8s.io and *.kubernetes.io groups, which a CRD may not use without Kubernetes' API approval;
//   - Cluster API's own kinds (group cluster.x-k8s.io: Machines, MachineSets, Clusters);
//   - metalheal's own kinds other than PowerCycleRemediation and its template (BMCs, the checks).
//
// What remains can only be watched if the manager may list it, which its own ClusterRole never grants
// beyond the kinds above: an administrator grants a remediator's kinds through the ext-remediation
// aggregation (kindwatch.AggregationLabel).
func CheckRemediationKind(gvk schema.GroupVersionKind) error {
	refuse := func(reason string) error { return &RefusedKindError{GVK: gvk, Reason: reason} }
	group := gvk.Group
	switch {
	case group == "":
		return refuse("it is a built-in Kubernetes kind (the core API group)")
	case !strings.Contains(group, "."):
		return refuse("it is a built-in Kubernetes kind (API group " + group + ")")
	case group == "k8s.io" || strings.HasSuffix(group, ".k8s.io") && !strings.HasSuffix(group, ".x-k8s.io") ||
		group == "kubernetes.io" || strings.HasSuffix(group, ".kubernetes.io"):
		return refuse("it is a Kubernetes API kind (API group " + group + ")")
	case group == clusterAPICoreGroup:
		return refuse("it is one of Cluster API's own kinds (API group " + group + ")")
	case group == v1alpha1.GroupVersion.Group && gvk.Kind != "PowerCycleRemediation" && gvk.Kind != "PowerCycleRemediationTemplate":
		return refuse("metalheal's only remediation kind is PowerCycleRemediation")
	}
	return nil
}

// CheckRemediationKinds checks every remediation kind a health check names (CheckRemediationKind) and
// that they are at most MaxRemediationKinds distinct kinds.
func CheckRemediationKinds(gvks []schema.GroupVersionKind) error {
	distinct := map[schema.GroupVersionKind]bool{}
	for _, gvk := range gvks {
		if err := CheckRemediationKind(gvk); err != nil {
			return err
		}
		distinct[gvk] = true
	}
	if len(distinct) > MaxRemediationKinds {
		return &RefusedKindError{Reason: fmt.Sprintf(
			"the check names %d distinct remediation kinds; at most %d are accepted", len(distinct), MaxRemediationKinds)}
	}
	return nil
}
