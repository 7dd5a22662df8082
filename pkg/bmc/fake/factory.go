package fake

import (
	"fmt"
	"sync"

	"github.com/metalheal/metalheal/pkg/bmc"
)

// Factory hands out one fake Driver per BMC address; its New method is a bmc.Factory.
type Factory struct {
	mu      sync.Mutex
	initial bmc.PowerState
	drivers map[string]*Driver
	newErrs map[string]error
}

// NewFactory returns a Factory whose hosts start in the given power state.
func NewFactory(initial bmc.PowerState) *Factory {
	return &Factory{initial: initial, drivers: map[string]*Driver{}, newErrs: map[string]error{}}
}

// New returns the fake Driver for addr, creating it on first use. It matches bmc.Factory.
func (f *Factory) New(addr bmc.Address, creds bmc.Credentials, _ bmc.Options) (bmc.Driver, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := addr.String()
	if err := f.newErrs[key]; err != nil {
		return nil, err
	}
	d := f.driverLocked(key)
	d.mu.Lock()
	d.credentials = creds
	d.mu.Unlock()
	return d, nil
}

// Driver returns the fake Driver for address (any spelling ParseAddress accepts), creating it if the
// factory has not built it yet. It panics on an invalid address: that is a bug in the test.
func (f *Factory) Driver(address string) *Driver {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.driverLocked(canonical(address))
}

// SetNewError makes New fail with err for address; a nil err clears it.
func (f *Factory) SetNewError(address string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		delete(f.newErrs, canonical(address))
		return
	}
	f.newErrs[canonical(address)] = err
}

func (f *Factory) driverLocked(key string) *Driver {
	d, ok := f.drivers[key]
	if !ok {
		d = New(f.initial)
		f.drivers[key] = d
	}
	return d
}

func canonical(address string) string {
	a, err := bmc.ParseAddress(address)
	if err != nil {
		panic(fmt.Sprintf("fake: %v", err))
	}
	return a.String()
}
