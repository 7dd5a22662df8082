package bmc

import (
	"errors"
	"fmt"
	"slices"
	"sync"
)

// Factory builds a Driver for a parsed address. Each protocol package provides one (ipmi.New,
// ironic.New; Redfish through a small adapter in main).
type Factory func(addr Address, creds Credentials, opts Options) (Driver, error)

// Registry maps driver names (DriverRedfish, DriverIPMI, DriverIronic) to their factories. Build one in
// main, register every driver the binary supports, and share it; it is safe for concurrent use.
type Registry struct {
	mu        sync.RWMutex
	factories map[string]Factory
	metrics   *Metrics
}

// RegistryOption configures a Registry.
type RegistryOption func(*Registry)

// WithMetrics makes New wrap every driver it builds with Instrument, counting requests in m.
func WithMetrics(m *Metrics) RegistryOption {
	return func(r *Registry) { r.metrics = m }
}

// NewRegistry returns an empty Registry.
func NewRegistry(opts ...RegistryOption) *Registry {
	r := &Registry{factories: map[string]Factory{}}
	for _, o := range opts {
		o(r)
	}
	return r
}

// Register makes f the factory for driver. It refuses a nil factory, a driver name ParseAddress never
// yields, and a driver that already has a factory.
func (r *Registry) Register(driver string, f Factory) error {
	if f == nil {
		return errors.New("bmc: cannot register a nil factory")
	}
	if !slices.Contains([]string{DriverRedfish, DriverIPMI, DriverIronic}, driver) {
		return fmt.Errorf("bmc: cannot register unknown driver %q (known: %s, %s, %s)", driver, DriverRedfish, DriverIPMI, DriverIronic)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.factories[driver]; ok {
		return fmt.Errorf("bmc: driver %q is already registered", driver)
	}
	r.factories[driver] = f
	return nil
}

// New parses address and returns a Driver for it from the registered factory. It returns an
// *AddressError or *UnknownSchemeError for an address it cannot parse, and a *DriverNotRegisteredError
// when the address is valid but this binary has no driver for it.
func (r *Registry) New(address string, creds Credentials, opts Options) (Driver, error) {
	addr, err := ParseAddress(address)
	if err != nil {
		return nil, err
	}
	r.mu.RLock()
	f, ok := r.factories[addr.Driver]
	r.mu.RUnlock()
	if !ok {
		return nil, &DriverNotRegisteredError{Driver: addr.Driver}
	}
	d, err := f(addr, creds, opts)
	if err != nil {
		return nil, fmt.Errorf("creating %s driver for %s: %w", addr.Driver, addr, err)
	}
	return Instrument(d, addr.Driver, r.metrics), nil
}

// DriverNotRegisteredError is returned by Registry.New for a valid address whose driver has no factory.
type DriverNotRegisteredError struct {
	Driver string
}

func (e *DriverNotRegisteredError) Error() string {
	return fmt.Sprintf("bmc: no %s driver is registered", e.Driver)
}
