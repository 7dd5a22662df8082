package bmcdrivers

import (
	"fmt"

	"github.com/metalheal/metalheal/pkg/bmc"
	"github.com/metalheal/metalheal/pkg/bmc/ipmi"
	"github.com/metalheal/metalheal/pkg/bmc/ironic"
	"github.com/metalheal/metalheal/pkg/bmc/redfish"
)

// NewRegistry returns the registry of every BMC driver: Redfish (and its vendor aliases), IPMI and
// Ironic. Drivers it builds are counted in metrics (nil counts nothing).
func NewRegistry(metrics *bmc.Metrics) *bmc.Registry {
	reg := bmc.NewRegistry(bmc.WithMetrics(metrics))
	for driver, factory := range map[string]bmc.Factory{
		bmc.DriverRedfish: redfishFactory,
		bmc.DriverIPMI:    ipmi.New,
		bmc.DriverIronic:  ironic.New,
	} {
		if err := reg.Register(driver, factory); err != nil {
			// Only a programming error gets here (a duplicate or unknown driver name).
			panic(fmt.Sprintf("registering the %s BMC driver: %v", driver, err))
		}
	}
	return reg
}

// redfishFactory adapts redfish.New to bmc.Factory: the service lives at the address's endpoint
// (http(s)://host:port, by the scheme's transport) and the system at its path (empty: the only one).
func redfishFactory(addr bmc.Address, creds bmc.Credentials, opts bmc.Options) (bmc.Driver, error) {
	return redfish.New(addr.Endpoint(), addr.Path, creds, opts)
}
