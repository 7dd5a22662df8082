package testenv

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"

	"k8s.io/client-go/tools/clientcmd"
)

// Proxy forwards TCP connections to an API server, TLS and all, and can stall them: while stalled nothing
// passes either way, the connections stay open and new ones are accepted and held, as an API server that
// stopped answering without closing anything (a hung process, a black-holed network). A kubeconfig
// pointed at the Proxy (Kubeconfig) reaches the API server through it.
type Proxy struct {
	target string
	ln     net.Listener

	mu      sync.Mutex
	conns   []net.Conn
	resumed chan struct{} // closed while traffic flows
}

// NewProxy listens on a free local port and forwards to the server of kubeconfig's current context.
// Close it when done.
func NewProxy(kubeconfig []byte) (*Proxy, error) {
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		return nil, err
	}
	kctx := cfg.Contexts[cfg.CurrentContext]
	if kctx == nil || cfg.Clusters[kctx.Cluster] == nil {
		return nil, errors.New("kubeconfig has no current cluster")
	}
	u, err := url.Parse(cfg.Clusters[kctx.Cluster].Server)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: u.Host, ln: ln, resumed: make(chan struct{})}
	close(p.resumed)
	go p.serve()
	return p, nil
}

// Kubeconfig is kubeconfig with every cluster's server the Proxy (the API server's certificate holds for
// 127.0.0.1).
func (p *Proxy) Kubeconfig(kubeconfig []byte) ([]byte, error) {
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		return nil, err
	}
	for _, c := range cfg.Clusters {
		c.Server = "https://" + p.ln.Addr().String()
	}
	return clientcmd.Write(*cfg)
}

// Stall holds every byte from now on, in both directions, until Resume.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.resumed:
		p.resumed = make(chan struct{})
	default: // stalled already
	}
}

// Resume lets the held bytes and the rest through.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.resumed:
	default:
		close(p.resumed)
	}
}

// Close stops listening and closes every connection.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.Resume()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		go p.pipe(up, c)
		go p.pipe(c, up)
	}
}

// pipe copies src to dst, holding each chunk while the Proxy is stalled.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer func() { _ = dst.Close(); _ = src.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			resumed := p.resumed
			p.mu.Unlock()
			<-resumed
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// String names the Proxy and its target, for test messages.
func (p *Proxy) String() string { return fmt.Sprintf("proxy %s -> %s", p.ln.Addr(), p.target) }
