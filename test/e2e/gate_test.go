//go:build e2e

package e2e

import (
	"context"
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
)

// phaseGateName names the ValidatingAdmissionPolicy, its binding and its parameter ConfigMap.
const phaseGateName = "e2e-phase-hold"

// phaseGateExpression allows a PowerCycleRemediation's status update unless its parameters (a ConfigMap:
// request name → phase) hold the request in the phase it is leaving; held in "", a new request is held
// before its first phase.
const phaseGateExpression = `!(has(params.data) && object.metadata.name in params.data &&
  (has(oldObject.status) && has(oldObject.status.phase) ? oldObject.status.phase : '') == params.data[object.metadata.name] &&
  (has(object.status) && has(object.status.phase) ? object.status.phase : '') != params.data[object.metadata.name])`

// phaseGate holds remediation requests in a phase: the API server refuses the status update that would
// move a held request on, so the manager does the phase's work and cannot record that it is done. A
// scenario kills the manager right there — the worst moment for a crash — and releases the request.
// Nothing else about the request is held: conditions, power requests and taints within the phase are
// recorded as usual.
type phaseGate struct {
	c   client.Client
	key client.ObjectKey
}

// installPhaseGate creates the policy, its binding and its (empty) parameters.
func installPhaseGate(ctx context.Context, c client.Client) (*phaseGate, error) {
	g := &phaseGate{c: c, key: client.ObjectKey{Namespace: metav1.NamespaceDefault, Name: phaseGateName}}
	params := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: g.key.Namespace, Name: g.key.Name}}
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: phaseGateName},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Ignore),
			ParamKind:     &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"},
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
						Rule: admissionregistrationv1.Rule{
							APIGroups:   []string{v1alpha1.GroupVersion.Group},
							APIVersions: []string{v1alpha1.GroupVersion.Version},
							Resources:   []string{"powercycleremediations/status"},
						},
					},
				}},
			},
			Validations: []admissionregistrationv1.Validation{{
				Expression: phaseGateExpression,
				Message:    "held in its phase by the e2e suite",
			}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: phaseGateName},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        phaseGateName,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			ParamRef: &admissionregistrationv1.ParamRef{
				Name:                    g.key.Name,
				Namespace:               g.key.Namespace,
				ParameterNotFoundAction: ptr.To(admissionregistrationv1.AllowAction),
			},
		},
	}
	for _, o := range []client.Object{params, policy, binding} {
		if err := ignoreAlreadyExists(c.Create(ctx, o)); err != nil {
			return nil, fmt.Errorf("creating the phase gate's %T: %w", o, err)
		}
	}
	return g, nil
}

// hold holds the request named name (any namespace) in phase, for the rest of the scenario unless
// released sooner.
func (g *phaseGate) hold(ctx context.Context, name string, phase v1alpha1.PowerCyclePhase) {
	GinkgoHelper()
	g.set(ctx, func(data map[string]string) { data[name] = string(phase) })
	DeferCleanup(func(ctx SpecContext) { g.release(ctx, name) })
}

// release lets requests move on.
func (g *phaseGate) release(ctx context.Context, names ...string) {
	GinkgoHelper()
	g.set(ctx, func(data map[string]string) {
		for _, n := range names {
			delete(data, n)
		}
	})
}

func (g *phaseGate) set(ctx context.Context, change func(map[string]string)) {
	GinkgoHelper()
	Eventually(func(g2 Gomega) {
		cm := &corev1.ConfigMap{}
		g2.Expect(g.c.Get(ctx, g.key, cm)).To(Succeed())
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		change(cm.Data)
		g2.Expect(g.c.Update(ctx, cm)).To(Succeed())
	}).WithContext(ctx).WithTimeout(settledWait).WithPolling(poll).Should(Succeed())
}
