package powerwatch

import (
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/internal/testenv"
)

// The package's envtest suite: one real kube-apiserver and etcd for every spec (internal/testenv). Specs
// isolate themselves in namespaces (and Nodes) of their own; the decision tables stay plain testing.
var (
	env       *testenv.Env
	k8sClient client.Client // uncached: what the API server holds
	scheme    *runtime.Scheme
)

func TestPowerWatch(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Power watch")
}

var _ = BeforeSuite(func() {
	var err error
	env, err = testenv.Up(testenv.EnvOptions{})
	Expect(err).NotTo(HaveOccurred())
	k8sClient, scheme = env.Client, env.Scheme
})

var _ = AfterSuite(func() {
	Expect(env.Stop()).To(Succeed())
})
