// Command redfish-mock serves simulated Redfish BMCs until interrupted:
//
//	go run ./test/redfish-mock --systems 100 --listen 127.0.0.1:8000 --power-delay 5s
//
// Each system is at /redfish/v1/Systems/N. With --control, faults are injected over HTTP under /mock/
// (see the redfishmock package), for example:
//
//	curl -X POST -d '{"status":503,"count":3}' http://127.0.0.1:8000/mock/systems/1/faults
//
// The hosts may ignore a graceful shutdown, or power off (or reboot) on their own some time after an
// NMI, as a host writing a kernel dump does: --ignore-graceful-shutdown, --power-off-after-nmi 30s, or per
// system over the control endpoint (POST /mock/systems/N/host).
//
// Every power change is streamed as a Redfish Event on the EventService's Server-Sent Events URI:
//
//	curl -N -u admin:password http://127.0.0.1:8000/redfish/v1/EventService/SSE
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
		ignoreSoft = flag.Bool("ignore-graceful-shutdown", false, "hosts ignore GracefulShutdown and GracefulRestart (a hung operating system)")
		nmiOff     = flag.Duration("power-off-after-nmi", 0, "hosts power themselves off this long after an Nmi reset (a kernel dump, then power off); 0: an NMI changes nothing")
		nmiReboot  = flag.Duration("reboot-after-nmi", 0, "hosts restart this long after an Nmi reset (a kernel dump, then a reboot)")
		events     = flag.String("event-service", string(redfishmock.EventServiceEnabled), "what the EventService offers: Enabled (a Server-Sent Events stream of power changes), Disabled, NoSSE or Absent")
		keepAlive  = flag.Duration("event-keep-alive", redfishmock.DefaultEventKeepAlive, "how often an idle event stream carries a keep-alive comment; 0: never")
	)
	flag.Parse()

	m := redfishmock.New().
		WithSystems(*systems).
		WithListenAddress(*listen).
		WithCredentials(*username, *password).
		WithPowerDelay(*powerDelay).
		WithEventService(redfishmock.EventService(*events)).
		WithEventKeepAlive(*keepAlive).
		WithHost(redfishmock.Host{IgnoreGracefulShutdown: *ignoreSoft, PowerOffAfterNMI: *nmiOff, RebootAfterNMI: *nmiReboot})
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
