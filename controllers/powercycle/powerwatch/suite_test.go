package powerwatch

import (
	"context"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/testenv"
)

// The package's envtest suite: one real kube-apiserver and etcd for every spec. Specs isolate themselves
// in namespaces (and Nodes) of their own.
var (
	testEnv   *envtest.Environment
	cfg       *rest.Config
	k8sClient client.Client // uncached: what the API server holds
	scheme    *runtime.Scheme
)

func TestPowerWatch(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Power watch")
}

var _ = BeforeSuite(func() {
	var err error
	testEnv, cfg, err = testenv.Start(testenv.Options{})
	Expect(err).NotTo(HaveOccurred())

	scheme = runtime.NewScheme()
	Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	Expect(v1alpha1.AddToScheme(scheme)).To(Succeed())
	k8sClient, err = client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	if testEnv != nil {
		Expect(testEnv.Stop()).To(Succeed())
	}
})

// newNamespace creates a namespace for one spec and returns its name.
func newNamespace(ctx context.Context) string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "powerwatch-test-"}}
	Expect(k8sClient.Create(ctx, ns)).To(Succeed())
	return ns.Name
}
