package bmc_test

import (
	"context"
	"errors"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/metalheal/metalheal/pkg/bmc"
	"github.com/metalheal/metalheal/pkg/bmc/fake"
)

func TestRegistryRegister(t *testing.T) {
	factory := fake.NewFactory(bmc.PowerStateOn).New
	for _, tc := range []struct {
		name    string
		driver  string
		factory bmc.Factory
		wantErr string
	}{
		{name: "redfish", driver: bmc.DriverRedfish, factory: factory},
		{name: "ipmi", driver: bmc.DriverIPMI, factory: factory},
		{name: "ironic", driver: bmc.DriverIronic, factory: factory},
		{name: "duplicate", driver: "dup", factory: factory, wantErr: `driver "ipmi" is already registered`},
		{name: "a scheme is not a driver", driver: "idrac-redfish", factory: factory, wantErr: `unknown driver "idrac-redfish"`},
		{name: "nil factory", driver: bmc.DriverIPMI, wantErr: "nil factory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			r := bmc.NewRegistry()
			driver := tc.driver
			if driver == "dup" {
				driver = bmc.DriverIPMI
				g.Expect(r.Register(driver, factory)).To(Succeed())
			}
			err := r.Register(driver, tc.factory)
			if tc.wantErr == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(MatchError(ContainSubstring(tc.wantErr)))
		})
	}
}

func TestRegistryNew(t *testing.T) {
	hosts := fake.NewFactory(bmc.PowerStateOn)
	var built []bmc.Address
	recording := func(addr bmc.Address, creds bmc.Credentials, opts bmc.Options) (bmc.Driver, error) {
		built = append(built, addr)
		return hosts.New(addr, creds, opts)
	}
	failing := func(bmc.Address, bmc.Credentials, bmc.Options) (bmc.Driver, error) {
		return nil, &bmc.Error{Driver: bmc.DriverIronic, Operation: "New", Kind: bmc.ErrUnsupported}
	}
	r := bmc.NewRegistry()
	NewWithT(t).Expect(r.Register(bmc.DriverRedfish, recording)).To(Succeed())
	NewWithT(t).Expect(r.Register(bmc.DriverIronic, failing)).To(Succeed())

	for _, tc := range []struct {
		name      string
		address   string
		wantBuilt bmc.Address
		check     func(g Gomega, err error)
	}{
		{
			name:      "dispatches an alias to its driver",
			address:   "idrac-redfish://10.0.0.1/redfish/v1/Systems/System.Embedded.1",
			wantBuilt: bmc.Address{Driver: "redfish", Scheme: "idrac-redfish", Host: "10.0.0.1", Port: "443", Path: "/redfish/v1/Systems/System.Embedded.1", Transport: "https"},
		},
		{
			name:    "unknown scheme",
			address: "amt://10.0.0.1",
			check: func(g Gomega, err error) {
				var use *bmc.UnknownSchemeError
				g.Expect(errors.As(err, &use)).To(BeTrue())
				g.Expect(use.Scheme).To(Equal("amt"))
			},
		},
		{
			name:    "invalid address",
			address: "redfish://10.0.0.1:99999",
			check: func(g Gomega, err error) {
				var ae *bmc.AddressError
				g.Expect(errors.As(err, &ae)).To(BeTrue())
			},
		},
		{
			name:    "valid address without a registered driver",
			address: "10.0.0.1",
			check: func(g Gomega, err error) {
				var nr *bmc.DriverNotRegisteredError
				g.Expect(errors.As(err, &nr)).To(BeTrue())
				g.Expect(err).To(MatchError(ContainSubstring("no ipmi driver")))
			},
		},
		{
			name:    "factory error is wrapped with the address",
			address: "ironic://10.0.0.9/node-1",
			check: func(g Gomega, err error) {
				g.Expect(err).To(MatchError(bmc.ErrUnsupported))
				g.Expect(err).To(MatchError(ContainSubstring("ironic://10.0.0.9:6385/node-1")))
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			built = nil
			d, err := r.New(tc.address, bmc.Credentials{Username: "u", Password: "p"}, bmc.Options{})
			if tc.check != nil {
				g.Expect(d).To(BeNil())
				tc.check(g, err)
				g.Expect(built).To(BeEmpty())
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(built).To(Equal([]bmc.Address{tc.wantBuilt}))
			g.Expect(d.PowerOff(context.Background(), true)).To(Succeed())
			g.Expect(hosts.Driver(tc.address).CallCount(bmc.OperationPowerOff)).To(Equal(1))
		})
	}
}
