package nodecache

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// The Node transform keeps everything a health check or the remediator reads (labels, annotations,
// taints, conditions) and drops the rest of the bulk.
func TestSlimKeepsWhatControllersRead(t *testing.T) {
	g := NewWithT(t)
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: "worker-1", Labels: map[string]string{"node-role.kubernetes.io/worker": ""},
			Annotations:   map[string]string{"a": "b"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}},
		},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoSchedule}}, Unschedulable: true},
		Status: corev1.NodeStatus{
			Conditions:      []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}},
			Images:          []corev1.ContainerImage{{Names: []string{"registry/image:tag"}, SizeBytes: 1 << 20}},
			VolumesAttached: []corev1.AttachedVolume{{Name: "v", DevicePath: "/dev/sdb"}},
			VolumesInUse:    []corev1.UniqueVolumeName{"v"},
			Config:          &corev1.NodeConfigStatus{},
			NodeInfo:        corev1.NodeSystemInfo{BootID: "boot-1"},
		},
	}
	want := node.DeepCopy()
	want.ManagedFields, want.Status.Images, want.Status.VolumesAttached, want.Status.VolumesInUse, want.Status.Config = nil, nil, nil, nil, nil

	got, err := Slim(node)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal(want))

	tombstone := cache.DeletedFinalStateUnknown{Key: "worker-1", Obj: node}
	got, err = Slim(tombstone)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal(tombstone))
}
