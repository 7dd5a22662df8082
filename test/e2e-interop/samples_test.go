//go:build interop

package interop

import (
	"os"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/internal/testenv"
	"github.com/metalheal/metalheal/test/peers"
)

var _ = Describe("The samples for Cluster API and medik8s users", func() {
	It("are accepted by the peers' CRDs and admission webhooks", func(ctx SpecContext) {
		// The templates are created (medik8s' webhook reads every template of the kind); the checks are
		// only dry-run, so that no check of the samples runs in the world.
		for _, f := range []string{"powercycleremediationtemplate.yaml", "clusterapi-machinehealthcheck.yaml", "medik8s-nodehealthcheck.yaml"} {
			raw, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "samples", f))
			Expect(err).NotTo(HaveOccurred())
			objs, err := peers.DecodeAll(raw)
			Expect(err).NotTo(HaveOccurred())
			for _, o := range objs {
				if o.GetKind() == "PowerCycleRemediationTemplate" {
					create(ctx, o)
					continue
				}
				Expect(k8s.Create(ctx, o, client.DryRunAll)).To(Succeed(), "%s %s from %s", o.GetKind(), o.GetName(), f)
			}
		}
	})
})
