package main

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/bmcaccess"
)

// TestCheckBMCPicksTheHostsBMC: bmc check reads the BMC the remediator would use for the host — the
// node's name and its cluster together — never a same-named Node's BMC of another cluster.
func TestCheckBMCPicksTheHostsBMC(t *testing.T) {
	const ns = "metalheal-system"
	bmcFor := func(name string, cluster *v1alpha1.ClusterReference) *v1alpha1.BMC {
		return &v1alpha1.BMC{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: v1alpha1.BMCSpec{NodeName: "worker-1", Cluster: cluster, Address: "redfish+http://127.0.0.1:1/redfish/v1/Systems/1",
				CredentialsSecretRef: v1alpha1.SecretReference{Name: "absent"}}}
	}
	edgeA := &v1alpha1.ClusterReference{Namespace: "fleet", Name: "edge-a"}
	tests := map[string]struct {
		bmcs       []*v1alpha1.BMC
		host       bmcaccess.Host
		wantBMC    string
		wantReason string
	}{
		"the manager's cluster's worker-1": {
			bmcs: []*v1alpha1.BMC{bmcFor("mgmt", nil), bmcFor("edge-a", edgeA)},
			host: bmcaccess.Host{Node: "worker-1"}, wantBMC: "mgmt", wantReason: v1alpha1.ReasonSecretNotFound,
		},
		"edge-a's worker-1": {
			bmcs:    []*v1alpha1.BMC{bmcFor("mgmt", nil), bmcFor("edge-a", edgeA)},
			host:    bmcaccess.Host{Cluster: types.NamespacedName{Namespace: "fleet", Name: "edge-a"}, Node: "worker-1"},
			wantBMC: "edge-a", wantReason: v1alpha1.ReasonSecretNotFound,
		},
		"only another cluster's BMC names the node": {
			bmcs: []*v1alpha1.BMC{bmcFor("edge-a", edgeA)},
			host: bmcaccess.Host{Node: "worker-1"}, wantReason: v1alpha1.ReasonBMCNotFound,
		},
		"two BMCs for one host": {
			bmcs:       []*v1alpha1.BMC{bmcFor("edge-a", edgeA), bmcFor("edge-a-2", edgeA)},
			host:       bmcaccess.Host{Cluster: types.NamespacedName{Namespace: "fleet", Name: "edge-a"}, Node: "worker-1"},
			wantReason: v1alpha1.ReasonBMCAmbiguous,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			s := runtime.NewScheme()
			g.Expect(v1alpha1.AddToScheme(s)).To(Succeed())
			g.Expect(clientgoscheme.AddToScheme(s)).To(Succeed())
			b := fake.NewClientBuilder().WithScheme(s)
			for _, o := range tc.bmcs {
				b = b.WithObjects(o)
			}
			res, err := checkBMC(context.Background(), b.Build(), ns, tc.host, time.Second)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(res.BMC).To(Equal(tc.wantBMC))
			g.Expect(res.Reason).To(Equal(tc.wantReason))
		})
	}
}
