// Command redfish-mock serves simulated Redfish BMCs until interrupted:
//
//	go run ./test/redfish-mock --systems 100 --listen 127.0.0.1:8000 --power-delay 5s
//
// Each system is at /redfish/v1/Systems/N. With --control, faults are injected over HTTP under /mock/
// (see the redfishmock package), for example:
//
//	curl -X POST -d '{"status":503,"count":3}' http://127.0.0.1:8000/mock/systems/1/faults
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
)

func main() {
	var (
		systems    = flag.Int("systems", 1, "number of ComputerSystems to serve")
		listen     = flag.String("listen", "127.0.0.1:8000", "address to listen on (host:port)")
		useTLS     = flag.Bool("tls", false, "serve HTTPS with a self-signed certificate made at start")
		username   = flag.String("username", "admin", "the account's username")
		password   = flag.String("password", "password", "the account's password")
		powerDelay = flag.Duration("power-delay", 0, "how long a power transition takes (PoweringOn/PoweringOff meanwhile)")
		control    = flag.Bool("control", true, "serve the fault-injection control endpoint under /mock/")
		noSessions = flag.Bool("no-sessions", false, "offer no SessionService (clients must use basic auth)")
	)
	flag.Parse()

	m := redfishmock.New().
		WithSystems(*systems).
		WithListenAddress(*listen).
		WithCredentials(*username, *password).
		WithPowerDelay(*powerDelay)
	if *useTLS {
		m = m.WithTLS()
	}
	if *control {
		m = m.WithControlEndpoint()
	}
	if *noSessions {
		m = m.WithoutSessionService()
	}
	m.OnPowerChange(func(id string, from, to redfishmock.PowerState) {
		fmt.Printf("%s system %s: %s -> %s\n", time.Now().Format(time.RFC3339), id, from, to)
	})
	if _, err := m.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "redfish-mock:", err)
		os.Exit(1)
	}
	defer m.Close()
	fmt.Printf("redfish-mock: %d systems at %s%s/<1..%d>\n", *systems, m.URL(), "/redfish/v1/Systems", *systems)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
}
