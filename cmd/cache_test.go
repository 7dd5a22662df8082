package main

import (
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// The Node transform keeps everything a health check or the remediator reads (labels, annotations,
// taints, conditions) and drops the rest of the bulk.
func TestSlimNodeKeepsWhatControllersRead(t *testing.T) {
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

	got, err := slimNode(node)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal(want))

	tombstone := cache.DeletedFinalStateUnknown{Key: "worker-1", Obj: node}
	got, err = slimNode(tombstone)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal(tombstone))
}

// The informers reach the API server over a connection of their own, apart from the one client-go shares
// among the controllers' clients: on one HTTP/2 connection, a wave of writes held our watches back.
func TestCacheHasAConnectionOfItsOwn(t *testing.T) {
	g := NewWithT(t)
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{}`))
	}))
	srv.EnableHTTP2 = true
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.StartTLS()
	defer srv.Close()
	cfg := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{
		CAData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}),
	}}
	get := func(c *http.Client) {
		t.Helper()
		resp, err := c.Get(srv.URL)
		g.Expect(err).NotTo(HaveOccurred())
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		g.Expect(resp.ProtoMajor).To(Equal(2), "HTTP/2, whose one connection carries every request")
	}

	// What the manager's clients use: client-go hands the same transport to the same config.
	for range 2 {
		c, err := rest.HTTPClientFor(cfg)
		g.Expect(err).NotTo(HaveOccurred())
		get(c)
	}
	g.Expect(conns.Load()).To(BeEquivalentTo(1), "the controllers' clients share one connection")

	cacheClient, err := cacheHTTPClient(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	get(cacheClient)
	get(cacheClient)
	g.Expect(conns.Load()).To(BeEquivalentTo(2), "the cache has one of its own, and keeps it")
}
