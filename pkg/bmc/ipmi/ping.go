package ipmi

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/metalheal/metalheal/pkg/bmc"
)

// pingTimeout bounds a Ping when ctx allows longer.
const pingTimeout = 2 * time.Second

// presencePing is an RMCP (version 6, no ACK) ASF message: IANA enterprise 4542, Presence Ping.
var presencePing = []byte{0x06, 0x00, 0xff, 0x06, 0x00, 0x00, 0x11, 0xbe, 0x80, 0x4d, 0x00, 0x00}

// pongPrefix is what a Presence Pong to presencePing starts with: the same headers, type 0x40 and our tag.
var pongPrefix = []byte{0x06, 0x00, 0xff, 0x06, 0x00, 0x00, 0x11, 0xbe, 0x40, 0x4d}

// Ping sends an RMCP presence ping (DMTF ASF, DSP0136) to the BMC at hostport over UDP and waits for its
// pong, for at most 2s or until ctx is done. The ping needs no session: a BMC that answers is
// reachable, whatever it thinks of our credentials.
func Ping(ctx context.Context, hostport string) error {
	ctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	conn, err := bmc.DialContext(ctx, "udp", hostport)
	if err != nil {
		return err
	}
	defer conn.Close() //nolint:errcheck // nothing to flush on a UDP socket
	deadline, _ := ctx.Deadline()
	if err := conn.SetDeadline(deadline); err != nil {
		return err
	}
	if _, err := conn.Write(presencePing); err != nil {
		return err
	}
	buf := make([]byte, 64)
	for {
		n, err := conn.Read(buf)
		if err != nil {
			return fmt.Errorf("no RMCP presence pong from %s: %w", hostport, err)
		}
		if bytes.HasPrefix(buf[:n], pongPrefix) {
			return nil
		}
	}
}
