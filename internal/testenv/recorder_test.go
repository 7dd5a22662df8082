package testenv

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
)

func TestRecorder(t *testing.T) {
	g := NewWithT(t)
	s := runtime.NewScheme()
	g.Expect(clientgoscheme.AddToScheme(s)).To(Succeed())
	r := NewRecorder(s)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1"}}
	req := &unstructured.Unstructured{}
	req.SetKind("FenceRemediation")
	req.SetName("w1")
	type unknown struct{ corev1.Node }

	r.Eventf(node, nil, corev1.EventTypeNormal, "Created", "Create", "%s for %d", "made", 5)
	r.Eventf(req, node, corev1.EventTypeWarning, "Failed", "Remediate", "gave up")
	r.Eventf(&unknown{corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "x"}}}, (*corev1.Node)(nil), corev1.EventTypeNormal, "Created", "", "")

	g.Expect(r.All()).To(Equal([]Event{
		{Kind: "Node", Name: "w1", Type: corev1.EventTypeNormal, Reason: "Created", Action: "Create", Note: "made for 5"},
		{Kind: "FenceRemediation", Name: "w1", Related: "w1", Type: corev1.EventTypeWarning, Reason: "Failed", Action: "Remediate", Note: "gave up"},
		{Kind: "*testenv.unknown", Name: "x", Type: corev1.EventTypeNormal, Reason: "Created"},
	}), "kinds from the object, then the scheme, then the Go type; a nil related object names nothing")
	g.Expect(r.With("Created")).To(HaveLen(2))
	g.Expect(r.With("Missing")).To(BeEmpty())
}
