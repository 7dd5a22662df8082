package bmcdrivers

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/metalheal/metalheal/pkg/bmc"
)

// Every address form the manager documents gets a driver from the shared registry.
func TestNewRegistryKnowsEveryDriver(t *testing.T) {
	reg := NewRegistry(nil)
	for _, addr := range []string{
		"redfish://10.0.0.1/redfish/v1/Systems/1",
		"redfish+http://10.0.0.1:8000/redfish/v1/Systems/1",
		"idrac-redfish://10.0.0.1/redfish/v1/Systems/System.Embedded.1",
		"ilo5-redfish://10.0.0.1/redfish/v1/Systems/1",
		"ipmi://10.0.0.1:623",
		"ironic://10.0.0.1:6385/7a1f3d0e-0000-4000-8000-000000000001",
	} {
		t.Run(addr, func(t *testing.T) {
			g := NewWithT(t)
			d, err := reg.New(addr, bmc.Credentials{Username: "u", Password: "p"}, bmc.Options{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(d.Close(context.Background())).To(Succeed())
		})
	}
}
