package template

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// What a check's author may name as a remediation kind: the kind is the template's minus "Template", so
// a check naming "v1 NodeTemplate" would otherwise make the manager watch every Node once more, as
// unstructured objects.
func TestCheckRemediationKinds(t *testing.T) {
	gvk := func(apiVersion, kind string) schema.GroupVersionKind {
		return schema.FromAPIVersionAndKind(apiVersion, kind)
	}
	tests := []struct {
		name    string
		kinds   []schema.GroupVersionKind
		refused string // "" when accepted; else a part of the message
	}{
		{name: "metalheal's power cycle", kinds: []schema.GroupVersionKind{gvk("remediation.metalheal.io/v1alpha1", "PowerCycleRemediation")}},
		{name: "a remediator's kinds (medik8s, metal3)", kinds: []schema.GroupVersionKind{
			gvk("self-node-remediation.medik8s.io/v1alpha1", "SelfNodeRemediation"),
			gvk("infrastructure.cluster.x-k8s.io/v1beta1", "Metal3Remediation")}},
		{name: "Nodes (v1 NodeTemplate)", kinds: []schema.GroupVersionKind{gvk("v1", "Node")}, refused: "core API group"},
		{name: "Pods (v1 PodTemplate, a built-in template kind)", kinds: []schema.GroupVersionKind{gvk("v1", "Pod")}, refused: "core API group"},
		{name: "Deployments (apps/v1)", kinds: []schema.GroupVersionKind{gvk("apps/v1", "Deployment")}, refused: "API group apps"},
		{name: "Leases (coordination.k8s.io)", kinds: []schema.GroupVersionKind{gvk("coordination.k8s.io/v1", "Lease")}, refused: "coordination.k8s.io"},
		{name: "a *.kubernetes.io group", kinds: []schema.GroupVersionKind{gvk("snapshot.storage.kubernetes.io/v1", "VolumeSnapshot")}, refused: "Kubernetes API kind"},
		{name: "Machines (cluster.x-k8s.io MachineTemplate)", kinds: []schema.GroupVersionKind{gvk("cluster.x-k8s.io/v1beta2", "Machine")}, refused: "Cluster API's own kinds"},
		{name: "metalheal's BMCs", kinds: []schema.GroupVersionKind{gvk("remediation.metalheal.io/v1alpha1", "BMC")}, refused: "PowerCycleRemediation"},
		{name: "a refused kind among good ones", kinds: []schema.GroupVersionKind{
			gvk("remediation.metalheal.io/v1alpha1", "PowerCycleRemediation"), gvk("v1", "Node")}, refused: "Node"},
		{name: "the same kind in every step counts once", kinds: []schema.GroupVersionKind{
			gvk("a.example.com/v1", "A"), gvk("a.example.com/v1", "A"), gvk("a.example.com/v1", "A"), gvk("a.example.com/v1", "A")}},
		{name: "more distinct kinds than the bound", kinds: []schema.GroupVersionKind{
			gvk("a.example.com/v1", "A"), gvk("b.example.com/v1", "B"), gvk("c.example.com/v1", "C"), gvk("d.example.com/v1", "D")},
			refused: "4 distinct remediation kinds; at most 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			err := CheckRemediationKinds(tt.kinds)
			if tt.refused == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			var refused *RefusedKindError
			g.Expect(err).To(BeAssignableToTypeOf(refused))
			g.Expect(err.Error()).To(ContainSubstring(tt.refused))
		})
	}
}
