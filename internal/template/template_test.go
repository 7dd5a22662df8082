package template

import (
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	nodeRef = metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: "worker-3", UID: "node-uid"}
	nhcRef  = metav1.OwnerReference{
		APIVersion: "remediation.metalheal.io/v1alpha1", Kind: "NodeHealthCheck", Name: "workers", UID: "nhc-uid",
		Controller: new(true), BlockOwnerDeletion: new(true),
	}
	machineRef = metav1.OwnerReference{APIVersion: "cluster.x-k8s.io/v1beta2", Kind: "Machine", Name: "md-0-abc", UID: "m-uid"}
)

func powerCycleTemplate() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "remediation.metalheal.io/v1alpha1",
		"kind":       "PowerCycleRemediationTemplate",
		"metadata":   map[string]any{"name": "pool-a", "namespace": "metalheal-system", "labels": map[string]any{"on": "template"}},
		"spec": map[string]any{"template": map[string]any{
			"metadata": map[string]any{
				"labels":      map[string]any{"pool": "a"},
				"annotations": map[string]any{"team": "infra"},
			},
			"spec": map[string]any{"strategy": "reboot", "powerOffTimeoutSeconds": int64(120)},
		}},
	}}
}

func TestInstantiate(t *testing.T) {
	tests := []struct {
		name     string
		template func() *unstructured.Unstructured
		req      Request
		want     map[string]any
	}{
		{
			name:     "NHC: node target, template metadata and spec carried over",
			template: powerCycleTemplate,
			req:      Request{Name: "worker-3", NodeName: "worker-3", Target: nodeRef, HealthCheck: nhcRef},
			want: map[string]any{
				"apiVersion": "remediation.metalheal.io/v1alpha1",
				"kind":       "PowerCycleRemediation",
				"metadata": map[string]any{
					"name":      "worker-3",
					"namespace": "metalheal-system",
					"labels":    map[string]any{"pool": "a"},
					"annotations": map[string]any{
						"team":                                   "infra",
						"remediation.medik8s.io/node-name":       "worker-3",
						"remediation.medik8s.io/template-name":   "pool-a",
						"cluster.x-k8s.io/cloned-from-name":      "pool-a",
						"cluster.x-k8s.io/cloned-from-groupkind": "PowerCycleRemediationTemplate.remediation.metalheal.io",
					},
					"ownerReferences": []any{
						map[string]any{"apiVersion": "v1", "kind": "Node", "name": "worker-3", "uid": "node-uid"},
						map[string]any{"apiVersion": "remediation.metalheal.io/v1alpha1", "kind": "NodeHealthCheck", "name": "workers", "uid": "nhc-uid"},
					},
				},
				"spec": map[string]any{"strategy": "reboot", "powerOffTimeoutSeconds": int64(120)},
			},
		},
		{
			name: "MHC: foreign kind, machine target without node, no template metadata, no spec",
			template: func() *unstructured.Unstructured {
				return &unstructured.Unstructured{Object: map[string]any{
					"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
					"kind":       "Metal3RemediationTemplate",
					"metadata":   map[string]any{"name": "m3", "namespace": "ns1"},
					"spec":       map[string]any{"template": map[string]any{}},
				}}
			},
			req: Request{Name: "md-0-abc", Target: machineRef, ClusterName: "edge-7", HealthCheck: metav1.OwnerReference{
				APIVersion: "cluster.x-k8s.io/v1beta2", Kind: "MachineHealthCheck", Name: "mhc", UID: "mhc-uid"}},
			want: map[string]any{
				"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
				"kind":       "Metal3Remediation",
				"metadata": map[string]any{
					"name":      "md-0-abc",
					"namespace": "ns1",
					"labels":    map[string]any{"cluster.x-k8s.io/cluster-name": "edge-7"},
					"annotations": map[string]any{
						"remediation.medik8s.io/template-name":   "m3",
						"cluster.x-k8s.io/cloned-from-name":      "m3",
						"cluster.x-k8s.io/cloned-from-groupkind": "Metal3RemediationTemplate.infrastructure.cluster.x-k8s.io",
					},
					"ownerReferences": []any{
						map[string]any{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "name": "md-0-abc", "uid": "m-uid"},
						map[string]any{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineHealthCheck", "name": "mhc", "uid": "mhc-uid"},
					},
				},
			},
		},
		{
			name: "a control-plane target: medik8s' control-plane label",
			template: func() *unstructured.Unstructured {
				return &unstructured.Unstructured{Object: map[string]any{
					"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
					"kind":       "Metal3RemediationTemplate",
					"metadata":   map[string]any{"name": "m3", "namespace": "ns1"},
					"spec":       map[string]any{"template": map[string]any{}},
				}}
			},
			req: Request{Name: "cp-0", Target: machineRef, ClusterName: "edge-7", ControlPlane: true, HealthCheck: metav1.OwnerReference{
				APIVersion: "cluster.x-k8s.io/v1beta2", Kind: "MachineHealthCheck", Name: "mhc", UID: "mhc-uid"}},
			want: map[string]any{
				"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
				"kind":       "Metal3Remediation",
				"metadata": map[string]any{
					"name":      "cp-0",
					"namespace": "ns1",
					"labels":    map[string]any{"cluster.x-k8s.io/cluster-name": "edge-7", "remediation.medik8s.io/isControlPlaneNode": ""},
					"annotations": map[string]any{
						"remediation.medik8s.io/template-name":   "m3",
						"cluster.x-k8s.io/cloned-from-name":      "m3",
						"cluster.x-k8s.io/cloned-from-groupkind": "Metal3RemediationTemplate.infrastructure.cluster.x-k8s.io",
					},
					"ownerReferences": []any{
						map[string]any{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "name": "md-0-abc", "uid": "m-uid"},
						map[string]any{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineHealthCheck", "name": "mhc", "uid": "mhc-uid"},
					},
				},
			},
		},
		{
			name: "MHC: the cluster's label beside the template's, and over a template's own of that name",
			template: func() *unstructured.Unstructured {
				tpl := powerCycleTemplate()
				_ = unstructured.SetNestedStringMap(tpl.Object, map[string]string{"pool": "a", LabelClusterName: "another"},
					"spec", "template", "metadata", "labels")
				_ = unstructured.SetNestedMap(tpl.Object, map[string]any{}, "spec", "template", "spec")
				return tpl
			},
			req: Request{Name: "md-0-abc", NodeName: "worker-3", Target: machineRef, HealthCheck: nhcRef, ClusterName: "edge-7"},
			want: map[string]any{
				"apiVersion": "remediation.metalheal.io/v1alpha1",
				"kind":       "PowerCycleRemediation",
				"metadata": map[string]any{
					"name":      "md-0-abc",
					"namespace": "metalheal-system",
					"labels":    map[string]any{"pool": "a", "cluster.x-k8s.io/cluster-name": "edge-7"},
					"annotations": map[string]any{
						"team":                                   "infra",
						"remediation.medik8s.io/node-name":       "worker-3",
						"remediation.medik8s.io/template-name":   "pool-a",
						"cluster.x-k8s.io/cloned-from-name":      "pool-a",
						"cluster.x-k8s.io/cloned-from-groupkind": "PowerCycleRemediationTemplate.remediation.metalheal.io",
					},
					"ownerReferences": []any{
						map[string]any{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine", "name": "md-0-abc", "uid": "m-uid"},
						map[string]any{"apiVersion": "remediation.metalheal.io/v1alpha1", "kind": "NodeHealthCheck", "name": "workers", "uid": "nhc-uid"},
					},
				},
				"spec": map[string]any{},
			},
		},
		{
			name: "template annotations cannot override the contract's",
			template: func() *unstructured.Unstructured {
				tpl := powerCycleTemplate()
				_ = unstructured.SetNestedStringMap(tpl.Object, map[string]string{AnnotationNodeName: "someone-else"},
					"spec", "template", "metadata", "annotations")
				_ = unstructured.SetNestedMap(tpl.Object, map[string]any{}, "spec", "template", "spec")
				return tpl
			},
			req: Request{Name: "worker-3", NodeName: "worker-3", Target: nodeRef, HealthCheck: nhcRef},
			want: map[string]any{
				"apiVersion": "remediation.metalheal.io/v1alpha1",
				"kind":       "PowerCycleRemediation",
				"metadata": map[string]any{
					"name":      "worker-3",
					"namespace": "metalheal-system",
					"labels":    map[string]any{"pool": "a"},
					"annotations": map[string]any{
						"remediation.medik8s.io/node-name":       "worker-3",
						"remediation.medik8s.io/template-name":   "pool-a",
						"cluster.x-k8s.io/cloned-from-name":      "pool-a",
						"cluster.x-k8s.io/cloned-from-groupkind": "PowerCycleRemediationTemplate.remediation.metalheal.io",
					},
					"ownerReferences": []any{
						map[string]any{"apiVersion": "v1", "kind": "Node", "name": "worker-3", "uid": "node-uid"},
						map[string]any{"apiVersion": "remediation.metalheal.io/v1alpha1", "kind": "NodeHealthCheck", "name": "workers", "uid": "nhc-uid"},
					},
				},
				"spec": map[string]any{},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			tpl := tt.template()
			before := tpl.DeepCopy()
			tt.req.Template = tpl
			emr, err := Instantiate(tt.req)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(emr.Object).To(Equal(tt.want))

			// The EMR shares nothing with the template.
			if spec, ok := emr.Object["spec"].(map[string]any); ok {
				spec["strategy"] = "mutated"
			}
			g.Expect(tpl).To(Equal(before))
		})
	}
}

func TestInstantiateErrors(t *testing.T) {
	withSpecTemplate := func(v any) func() *unstructured.Unstructured {
		return func() *unstructured.Unstructured {
			tpl := powerCycleTemplate()
			tpl.Object["spec"] = map[string]any{"template": v}
			return tpl
		}
	}
	tests := []struct {
		name        string
		template    func() *unstructured.Unstructured
		req         Request
		wantInvalid bool // *InvalidTemplateError; otherwise *InvalidInputError
		wantMessage string
	}{
		{
			name: "kind without Template suffix",
			template: func() *unstructured.Unstructured {
				tpl := powerCycleTemplate()
				tpl.SetKind("PowerCycleRemediation")
				return tpl
			},
			wantInvalid: true, wantMessage: `does not end in "Template"`,
		},
		{
			name: "kind that is only the suffix",
			template: func() *unstructured.Unstructured {
				tpl := powerCycleTemplate()
				tpl.SetKind("Template")
				return tpl
			},
			wantInvalid: true, wantMessage: `does not end in "Template"`,
		},
		{
			name: "no spec.template",
			template: func() *unstructured.Unstructured {
				tpl := powerCycleTemplate()
				tpl.Object["spec"] = map[string]any{"strategy": "reboot"}
				return tpl
			},
			wantInvalid: true, wantMessage: "spec.template is missing",
		},
		{
			name: "no spec at all",
			template: func() *unstructured.Unstructured {
				tpl := powerCycleTemplate()
				delete(tpl.Object, "spec")
				return tpl
			},
			wantInvalid: true, wantMessage: "spec.template is missing",
		},
		{name: "spec.template is a string", template: withSpecTemplate("reboot"), wantInvalid: true, wantMessage: "spec.template is not an object"},
		{name: "spec.template.spec is a list", template: withSpecTemplate(map[string]any{"spec": []any{"x"}}), wantInvalid: true, wantMessage: "spec.template.spec is not an object"},
		{
			name:        "labels are not strings",
			template:    withSpecTemplate(map[string]any{"metadata": map[string]any{"labels": map[string]any{"a": int64(1)}}}),
			wantInvalid: true, wantMessage: "labels",
		},
		{
			name:        "annotations are not a map",
			template:    withSpecTemplate(map[string]any{"metadata": map[string]any{"annotations": "x"}}),
			wantInvalid: true, wantMessage: "annotations",
		},
		{name: "no template", template: func() *unstructured.Unstructured { return nil }, wantMessage: "no template"},
		{name: "empty name", template: powerCycleTemplate, req: Request{Target: nodeRef, HealthCheck: nhcRef}, wantMessage: "empty name"},
		{
			name: "target without uid", template: powerCycleTemplate,
			req:         Request{Name: "n", Target: metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: "n"}, HealthCheck: nhcRef},
			wantMessage: "target owner reference",
		},
		{
			name: "health check without kind", template: powerCycleTemplate,
			req:         Request{Name: "n", Target: nodeRef, HealthCheck: metav1.OwnerReference{APIVersion: "v1", Name: "x", UID: "u"}},
			wantMessage: "health check owner reference",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			req := tt.req
			if req.Name == "" && req.Target == (metav1.OwnerReference{}) {
				req = Request{Name: "worker-3", NodeName: "worker-3", Target: nodeRef, HealthCheck: nhcRef}
			}
			req.Template = tt.template()
			emr, err := Instantiate(req)
			g.Expect(emr).To(BeNil())
			g.Expect(err).To(MatchError(ContainSubstring(tt.wantMessage)))
			var invTpl *InvalidTemplateError
			var invIn *InvalidInputError
			if tt.wantInvalid {
				g.Expect(errors.As(err, &invTpl)).To(BeTrue(), "want *InvalidTemplateError, got %T", err)
				g.Expect(invTpl.Template).To(Equal(req.Template.GetKind() + " metalheal-system/pool-a"))
			} else {
				g.Expect(errors.As(err, &invIn)).To(BeTrue(), "want *InvalidInputError, got %T", err)
			}
		})
	}
}

func TestRemediationGVK(t *testing.T) {
	tests := map[string]struct {
		in      schema.GroupVersionKind
		want    schema.GroupVersionKind
		wantErr bool
	}{
		"ours": {
			in:   schema.GroupVersionKind{Group: "remediation.metalheal.io", Version: "v1alpha1", Kind: "PowerCycleRemediationTemplate"},
			want: schema.GroupVersionKind{Group: "remediation.metalheal.io", Version: "v1alpha1", Kind: "PowerCycleRemediation"},
		},
		"medik8s": {
			in:   schema.GroupVersionKind{Group: "self-node-remediation.medik8s.io", Version: "v1alpha1", Kind: "SelfNodeRemediationTemplate"},
			want: schema.GroupVersionKind{Group: "self-node-remediation.medik8s.io", Version: "v1alpha1", Kind: "SelfNodeRemediation"},
		},
		"no suffix":        {in: schema.GroupVersionKind{Kind: "Remediation"}, wantErr: true},
		"suffix not final": {in: schema.GroupVersionKind{Kind: "TemplateRemediation"}, wantErr: true},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := RemediationGVK(tt.in)
			if tt.wantErr {
				var inv *InvalidTemplateError
				g.Expect(errors.As(err, &inv)).To(BeTrue())
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tt.want))
		})
	}
}

func TestFindCondition(t *testing.T) {
	ltt := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	withStatus := func(status any) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"kind": "PowerCycleRemediation", "metadata": map[string]any{"name": "n"}}}
		if status != nil {
			u.Object["status"] = status
		}
		return u
	}
	conds := map[string]any{"conditions": []any{
		map[string]any{"type": "Processing", "status": "False", "reason": "Done", "message": "", "lastTransitionTime": "2025-06-01T12:00:00Z"},
		map[string]any{"type": "Succeeded", "status": "True", "reason": "PowerCycled", "message": "node is back",
			"lastTransitionTime": "2025-06-01T12:00:00Z", "observedGeneration": int64(2)},
		"not a condition",
	}}
	tests := []struct {
		name     string
		obj      *unstructured.Unstructured
		condType string
		want     *metav1.Condition
		wantErr  bool
	}{
		{
			name: "found", obj: withStatus(conds), condType: ConditionSucceeded,
			want: &metav1.Condition{Type: "Succeeded", Status: metav1.ConditionTrue, Reason: "PowerCycled", Message: "node is back",
				LastTransitionTime: metav1.NewTime(ltt), ObservedGeneration: 2},
		},
		{name: "absent type", obj: withStatus(conds), condType: ConditionPermanentNodeDeletionExpected},
		{name: "no status", obj: withStatus(nil), condType: ConditionSucceeded},
		{name: "status without conditions", obj: withStatus(map[string]any{"phase": "Pending"}), condType: ConditionSucceeded},
		{name: "conditions not a list", obj: withStatus(map[string]any{"conditions": "broken"}), condType: ConditionSucceeded, wantErr: true},
		{
			name: "condition with bad field type", condType: ConditionSucceeded, wantErr: true,
			obj: withStatus(map[string]any{"conditions": []any{map[string]any{"type": "Succeeded", "status": int64(3)}}}),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := FindCondition(tt.obj, tt.condType)
			if tt.wantErr {
				g.Expect(err).To(HaveOccurred())
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			if tt.want == nil {
				g.Expect(got).To(BeNil())
				return
			}
			g.Expect(got.LastTransitionTime.Time.Equal(tt.want.LastTransitionTime.Time)).To(BeTrue())
			got.LastTransitionTime = tt.want.LastTransitionTime
			g.Expect(got).To(Equal(tt.want))
		})
	}
}

func TestTimedOut(t *testing.T) {
	at := time.Date(2025, 6, 1, 12, 30, 0, 0, time.UTC)
	tests := []struct {
		name         string
		annotations  map[string]string
		mark         bool
		wantAt       time.Time
		wantTimedOut bool
		wantErr      bool
	}{
		{name: "not timed out"},
		{name: "marked", mark: true, wantAt: at, wantTimedOut: true},
		{name: "marking keeps an earlier mark", annotations: map[string]string{AnnotationTimedOut: "2025-06-01T12:00:00Z"}, mark: true,
			wantAt: at.Add(-30 * time.Minute), wantTimedOut: true},
		{name: "malformed value still counts as timed out", annotations: map[string]string{AnnotationTimedOut: "yes"}, wantTimedOut: true, wantErr: true},
		{name: "other annotations untouched", annotations: map[string]string{"a": "b"}, mark: true, wantAt: at, wantTimedOut: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			obj := &unstructured.Unstructured{Object: map[string]any{}}
			obj.SetAnnotations(tt.annotations)
			if tt.mark {
				MarkTimedOut(obj, at.In(time.FixedZone("x", 3600)))
			}
			gotAt, timedOut, err := TimedOut(obj)
			g.Expect(timedOut).To(Equal(tt.wantTimedOut))
			g.Expect(err != nil).To(Equal(tt.wantErr))
			g.Expect(gotAt.Equal(tt.wantAt)).To(BeTrue(), "got %v want %v", gotAt, tt.wantAt)
			for k, v := range tt.annotations {
				if k != AnnotationTimedOut {
					g.Expect(obj.GetAnnotations()).To(HaveKeyWithValue(k, v))
				}
			}
		})
	}
}
