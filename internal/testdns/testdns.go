// Package testdns gives a test the name resolution of a pod: a resolv.conf with the cluster's search
// domains and ndots 5 (what dnsPolicy ClusterFirst writes), and a DNS server of the test's own that
// answers whatever names the test chooses. With it a test sees which names a client really looks up:
// "bmc-7.example.com" has fewer than five dots, so a pod's resolver first asks for
// "bmc-7.example.com.svc.cluster.local." (which anyone who may create the namespace "com" can answer),
// while "bmc-7.example.com." (absolute, with its trailing dot) is asked for as written and nothing else.
//
// A resolv.conf is the machine's, so Rerun runs the test again in a child process with its own user,
// mount and network namespaces (unshare(1)): there /etc/resolv.conf is the test's, the loopback interface
// is up (every 127.0.0.0/8 address is local, so a "right" and an "attacker" server can each have one) and
// the test may listen on port 53. Both the Go resolver and libc's (an external program such as ipmitool)
// read it. Where user namespaces are not allowed, the test is skipped and says why.
//
// Production code never imports this package.
package testdns

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// PodResolvConf is the resolv.conf of a pod with dnsPolicy ClusterFirst in namespace metalheal-system,
// pointing at a DNS server on 127.0.0.1.
const PodResolvConf = `nameserver 127.0.0.1
search metalheal-system.svc.cluster.local svc.cluster.local cluster.local
options ndots:5
`

// envInside marks the child process Rerun starts.
const envInside = "METALHEAL_TESTDNS_INSIDE"

// Inside says whether this process is the child Rerun started: /etc/resolv.conf is the test's.
func Inside() bool { return os.Getenv(envInside) == "1" }

// Rerun runs the top-level test t again in a child process whose /etc/resolv.conf is resolvConf, with
// its own network namespace (loopback up), and fails t when the child fails. The child's output is
// logged. It fails t, saying what is missing, when user namespaces (unshare) or ip(8) are not available:
// the test cannot prove anything without them. Call it from a
// top-level test when Inside is false, and return.
func Rerun(t *testing.T, resolvConf string) {
	t.Helper()
	for _, tool := range []string{"unshare", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s(1) is needed to give the test a resolv.conf of its own (Debian: util-linux, iproute2): %v", tool, err)
		}
	}
	if out, err := exec.Command("unshare", "--user", "--map-root-user", "--mount", "--net", "true").CombinedOutput(); err != nil {
		t.Fatalf("user namespaces are not available, so the test cannot have a resolv.conf of its own "+
			"(allow them: sysctl kernel.unprivileged_userns_clone=1, or run as root): %v: %s", err, out)
	}
	path := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(path, []byte(resolvConf), 0o644); err != nil {
		t.Fatal(err)
	}
	const script = `mount --bind "$1" /etc/resolv.conf && ip link set lo up && shift && exec "$@"`
	cmd := exec.Command("unshare", "--user", "--map-root-user", "--mount", "--net", "sh", "-ec", script, "sh", path,
		os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd.Env = append(withoutProxies(os.Environ()), envInside+"=1")
	out, err := cmd.CombinedOutput()
	t.Logf("the test in a network namespace with the resolv.conf\n%s\n%s", resolvConf, out)
	if err != nil {
		t.Fatalf("the test failed in its network namespace: %v", err)
	}
}

// withoutProxies drops proxy settings: inside the namespace, the test's servers are all there is.
func withoutProxies(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		switch strings.ToUpper(name) {
		case "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY":
			continue
		}
		out = append(out, kv)
	}
	return out
}

// Server is a DNS server over UDP that answers A questions from a fixed table (names absolute, lower
// case: "bmc-7.example.com."), AAAA questions for those names with no address, and any other name with
// NXDOMAIN. It records every question it is asked.
type Server struct {
	conn    net.PacketConn
	records map[string]netip.Addr

	mu        sync.Mutex
	questions []string
}

// Start serves records on addr (host:port, UDP) until Close.
func Start(addr string, records map[string]netip.Addr) (*Server, error) {
	conn, err := net.ListenPacket("udp", addr)
	if err != nil {
		return nil, err
	}
	s := &Server{conn: conn, records: records}
	go s.serve()
	return s, nil
}

// Close stops the server.
func (s *Server) Close() { _ = s.conn.Close() }

// Questions returns the names asked for so far, in order; a name asked for twice in a row (its A and
// AAAA questions) appears once.
func (s *Server) Questions() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.questions...)
}

// Forget clears the record of questions.
func (s *Server) Forget() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.questions = nil
}

func (s *Server) serve() {
	buf := make([]byte, 1500)
	for {
		n, from, err := s.conn.ReadFrom(buf)
		if err != nil {
			return
		}
		if answer, err := s.answer(buf[:n]); err == nil {
			_, _ = s.conn.WriteTo(answer, from)
		}
	}
}

// DNS wire format (RFC 1035 4.1): a 12-byte header, then the question: the name as length-prefixed
// labels ending in a zero byte, its type and its class.
const (
	headerLen = 12
	typeA     = 1
	typeAAAA  = 28
	rcodeOK   = 0
	rcodeNX   = 3
)

// answer builds the response to the query msg.
func (s *Server) answer(msg []byte) ([]byte, error) {
	if len(msg) < headerLen || binary.BigEndian.Uint16(msg[4:6]) != 1 {
		return nil, errors.New("not a query with one question")
	}
	name, end, err := readName(msg, headerLen)
	if err != nil || end+4 > len(msg) {
		return nil, errors.New("malformed question")
	}
	qtype := binary.BigEndian.Uint16(msg[end : end+2])
	s.mu.Lock()
	if len(s.questions) == 0 || s.questions[len(s.questions)-1] != name {
		s.questions = append(s.questions, name)
	}
	s.mu.Unlock()

	addr, known := s.records[name]
	rcode, answers := rcodeOK, 0
	switch {
	case !known:
		rcode = rcodeNX
	case qtype == typeA && addr.Is4():
		answers = 1
	}
	out := make([]byte, 0, end+4+16)
	out = append(out, msg[0:2]...) // the query's ID
	// QR (a response), the query's opcode and RD, AA (authoritative), RA (recursion available), rcode.
	out = append(out, 0x80|0x04|(msg[2]&0x79), 0x80|byte(rcode))
	out = binary.BigEndian.AppendUint16(out, 1)               // one question
	out = binary.BigEndian.AppendUint16(out, uint16(answers)) //nolint:gosec // 0 or 1
	out = append(out, 0, 0, 0, 0)                             // no authority, no additional records
	out = append(out, msg[headerLen:end+4]...)                // the question, as asked
	if answers == 1 {
		out = append(out, 0xc0, headerLen) // the name: a pointer to the question's
		out = binary.BigEndian.AppendUint16(out, typeA)
		out = binary.BigEndian.AppendUint16(out, 1) // class IN
		out = binary.BigEndian.AppendUint32(out, 5) // TTL, seconds
		out = binary.BigEndian.AppendUint16(out, 4)
		ip := addr.As4()
		out = append(out, ip[:]...)
	}
	return out, nil
}

// readName reads the uncompressed name at off in msg, returning it absolute and in lower case, and the
// offset just after it.
func readName(msg []byte, off int) (string, int, error) {
	var labels []string
	for {
		if off >= len(msg) {
			return "", 0, errors.New("name runs past the message")
		}
		n := int(msg[off])
		off++
		if n == 0 {
			return strings.ToLower(strings.Join(labels, ".")) + ".", off, nil
		}
		if n > 63 || off+n > len(msg) {
			return "", 0, errors.New("bad label")
		}
		labels = append(labels, string(msg[off:off+n]))
		off += n
	}
}
