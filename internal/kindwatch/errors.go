package kindwatch

import (
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// AggregationLabel is the label of a ClusterRole whose rules the manager's ext-remediation ClusterRole
// aggregates (medik8s' convention, config/rbac/ext_remediation_role.yaml): how an administrator grants
// the manager a remediation kind.
const AggregationLabel = `rbac.ext-remediation/aggregate-to-ext-remediation: "true"`

// NotWatchableError says why a kind's informer did not sync, in words an administrator can act on.
type NotWatchableError struct {
	GVK schema.GroupVersionKind
	// Resource is the kind's resource, e.g. fooremediations; "" when unknown.
	Resource string
	// Verbs are what the manager needs on the kind; get, list and watch when empty.
	Verbs []string
	// Timeout is the bound the informer did not sync within; zero when it could not be started at all.
	Timeout time.Duration
	// Err is what a direct list of the kind answered (nil when it succeeded), or why the informer could not
	// be started.
	Err error
}

func (e *NotWatchableError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Cannot watch %s (%s)", e.GVK.Kind, e.GVK.GroupVersion())
	if e.Timeout > 0 {
		fmt.Fprintf(&b, ": not synced within %s", e.Timeout)
	}
	switch {
	case e.Err == nil:
		b.WriteString(", although listing it directly succeeds")
	case apierrors.IsForbidden(e.Err):
		resource := e.Resource
		if resource == "" {
			resource = "the resource of kind " + e.GVK.Kind
		}
		verbs := e.Verbs
		if len(verbs) == 0 {
			verbs = []string{"get", "list", "watch"}
		}
		fmt.Fprintf(&b, ": the manager may not list it (%v). Grant %s on %s in API group %q to the manager's "+
			"service account, e.g. by labelling a ClusterRole that grants them %s", e.Err, strings.Join(verbs, ", "), resource,
			e.GVK.Group, AggregationLabel)
	case apierrors.IsNotFound(e.Err) || meta.IsNoMatchError(e.Err):
		fmt.Fprintf(&b, ": the API server does not serve it (is its CRD installed?): %v", e.Err)
	default:
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	return b.String()
}

func (e *NotWatchableError) Unwrap() error { return e.Err }
