package bmcinventory

import (
	"context"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/internal/testenv"
)

// The package's envtest suite: one real kube-apiserver and etcd for every spec (internal/testenv). Specs
// isolate themselves in namespaces of their own.
var (
	env       *testenv.Env
	cfg       *rest.Config
	k8sClient client.Client // uncached: what the API server holds
	scheme    *runtime.Scheme
)

func TestBMCInventory(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "BMC inventory")
}

var _ = BeforeSuite(func() {
	var err error
	env, err = testenv.Up(testenv.EnvOptions{})
	Expect(err).NotTo(HaveOccurred())
	cfg, k8sClient, scheme = env.Config, env.Client, env.Scheme
})

var _ = AfterSuite(func() {
	Expect(env.Stop()).To(Succeed())
})

// newNamespace creates a namespace for one spec and returns its name.
func newNamespace(ctx context.Context) string {
	GinkgoHelper()
	return env.NewWorld(ctx, GinkgoT(), testenv.WorldOptions{GenerateNamespace: "bmcinventory-test-"}).Namespace
}
