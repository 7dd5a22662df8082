//go:build interop

package interop

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/internal/testenv"
)

// A peer is one of the other ecosystem's managers, built by hack/build-peers.sh into ./bin with what
// `kustomize build config/default` renders of its own repository beside it (bin/peers/<peer>/default.yaml).
type peerBuild struct {
	// name is the peer's directory under bin/peers and its name in logs.
	name string
	// binary is the manager's file name in ./bin.
	binary string
}

var (
	clusterAPI = peerBuild{name: "capi", binary: "capi-manager"}
	medik8s    = peerBuild{name: "nhc", binary: "nhc-manager"}
)

func (p peerBuild) binPath() string { return filepath.Join(testenv.RepoRoot(), "bin", p.binary) }

func (p peerBuild) manifestPath() string {
	return filepath.Join(testenv.RepoRoot(), "bin", "peers", p.name, "default.yaml")
}

// peerManifests is what a peer's config/default renders, split by what the suite does with it.
type peerManifests struct {
	// crds are installed with the world, their conversion webhooks pointed at the peer's local process.
	crds []*unstructured.Unstructured
	// install are applied as they are (namespace, service account, roles and bindings), and the webhook
	// configurations, pointed at the peer's local process.
	install []*unstructured.Unstructured
	// deployment is the peer's Deployment: where it runs (namespace, service account) and its flags.
	deployment *unstructured.Unstructured
}

// installedKinds are the kinds of config/default the suite applies: who the peer is and what it may do, and
// its admission webhooks. The rest (Deployment, Service, cert-manager's Certificate and Issuer, metrics
// monitors) are about running in a pod, which the peer's local process replaces.
var installedKinds = map[string]bool{
	"Namespace": true, "ServiceAccount": true, "Role": true, "RoleBinding": true, "ClusterRole": true,
	"ClusterRoleBinding": true, "MutatingWebhookConfiguration": true, "ValidatingWebhookConfiguration": true,
}

// loadPeer reads a peer's rendered config/default and points every webhook it declares (admission and CRD
// conversion) at https://127.0.0.1:<port> with the suite's CA.
func loadPeer(p peerBuild, webhookPort int, caPEM []byte) (*peerManifests, error) {
	for _, path := range []string{p.binPath(), p.manifestPath()} {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("%s is not built (run `make build-peers`): %w", p.name, err)
		}
	}
	raw, err := os.ReadFile(p.manifestPath())
	if err != nil {
		return nil, err
	}
	objs, err := decodeAll(raw)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", p.manifestPath(), err)
	}
	m := &peerManifests{}
	for _, o := range objs {
		if err := pointWebhooksAt(o, webhookPort, caPEM); err != nil {
			return nil, fmt.Errorf("%s %s: %w", o.GetKind(), o.GetName(), err)
		}
		switch kind := o.GetKind(); {
		case kind == "CustomResourceDefinition":
			m.crds = append(m.crds, o)
		case kind == "Deployment":
			m.deployment = o
		case installedKinds[kind]:
			m.install = append(m.install, o)
		}
	}
	if m.deployment == nil {
		return nil, fmt.Errorf("%s renders no Deployment", p.manifestPath())
	}
	return m, nil
}

func decodeAll(raw []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	var objs []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return objs, nil
		} else if err != nil {
			return nil, err
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

// pointWebhooksAt replaces each in-cluster Service reference of a webhook configuration or of a CRD's
// conversion webhook with the URL of the peer's process on this host, and cert-manager's CA injection with
// the suite's CA.
func pointWebhooksAt(o *unstructured.Unstructured, port int, caPEM []byte) error {
	rewrite := func(cc map[string]any) {
		path := "/"
		if svc, ok := cc["service"].(map[string]any); ok {
			if p, ok := svc["path"].(string); ok && p != "" {
				path = p
			}
		}
		delete(cc, "service")
		cc["url"] = fmt.Sprintf("https://127.0.0.1:%d%s", port, path)
		cc["caBundle"] = base64.StdEncoding.EncodeToString(caPEM)
	}
	switch o.GetKind() {
	case "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration":
		hooks, _, err := unstructured.NestedSlice(o.Object, "webhooks")
		if err != nil {
			return err
		}
		for _, h := range hooks {
			if cc, ok := h.(map[string]any)["clientConfig"].(map[string]any); ok {
				rewrite(cc)
			}
		}
		if err := unstructured.SetNestedSlice(o.Object, hooks, "webhooks"); err != nil {
			return err
		}
	case "CustomResourceDefinition":
		cc, found, err := unstructured.NestedMap(o.Object, "spec", "conversion", "webhook", "clientConfig")
		if err != nil || !found {
			return err
		}
		rewrite(cc)
		if err := unstructured.SetNestedField(o.Object, cc, "spec", "conversion", "webhook", "clientConfig"); err != nil {
			return err
		}
	default:
		return nil
	}
	annotations := o.GetAnnotations()
	delete(annotations, "cert-manager.io/inject-ca-from")
	o.SetAnnotations(annotations)
	return nil
}

// writeCRDs writes CRDs as one YAML file in dir, for the world to install.
func writeCRDs(dir, name string, crds []*unstructured.Unstructured) error {
	var buf bytes.Buffer
	for _, c := range crds {
		b, err := c.MarshalJSON()
		if err != nil {
			return err
		}
		buf.WriteString("---\n")
		buf.Write(b) // JSON is YAML
		buf.WriteString("\n")
	}
	return os.WriteFile(filepath.Join(dir, name+".yaml"), buf.Bytes(), 0o644)
}

// apply server-side applies objects as the administrator.
func apply(ctx context.Context, c client.Client, objs []*unstructured.Unstructured) error {
	for _, o := range objs {
		o = o.DeepCopy()
		if err := c.Patch(ctx, o, client.Apply, client.FieldOwner("interop-suite"), client.ForceOwnership); err != nil {
			return fmt.Errorf("applying %s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	return nil
}

// runsAs is where a Deployment runs and as whom: its namespace and the user name of its service account.
func runsAs(d *unstructured.Unstructured) (namespace, user string, err error) {
	sa, _, err := unstructured.NestedString(d.Object, "spec", "template", "spec", "serviceAccountName")
	if err != nil || sa == "" {
		return "", "", fmt.Errorf("deployment %s has no serviceAccountName", d.GetName())
	}
	return d.GetNamespace(), "system:serviceaccount:" + d.GetNamespace() + ":" + sa, nil
}

// envDefault matches a clusterctl variable with a default, "${NAME:=default}".
var envDefault = regexp.MustCompile(`\$\{[A-Za-z0-9_]+:=([^}]*)\}`)

// deploymentArgs returns the flags the Deployment's first container is started with, clusterctl's
// variables replaced by their defaults (what `clusterctl init` renders when none is set), without the
// flags in drop (matched by name).
func deploymentArgs(d *unstructured.Unstructured, drop ...string) ([]string, error) {
	containers, _, err := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	if err != nil || len(containers) == 0 {
		return nil, fmt.Errorf("deployment %s has no containers", d.GetName())
	}
	raw, _, err := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
	if err != nil {
		return nil, err
	}
	var args []string
next:
	for _, a := range raw {
		name, _, _ := strings.Cut(a, "=")
		for _, d := range drop {
			if name == d {
				continue next
			}
		}
		args = append(args, envDefault.ReplaceAllString(a, "$1"))
	}
	return args, nil
}

// webhookPKI is a CA and a serving certificate for 127.0.0.1, which the peers' webhook servers present.
type webhookPKI struct {
	caPEM, certPEM, keyPEM []byte
}

func newWebhookPKI(now time.Time) (*webhookPKI, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "interop-suite-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &webhookPKI{
		caPEM:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

// writeServingCert writes tls.crt and tls.key into dir (controller-runtime's webhook server's names).
func (p *webhookPKI) writeServingCert(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), p.certPEM, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "tls.key"), p.keyPEM, 0o600)
}

// peerProcess is a peer's manager running as its own process.
type peerProcess struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{}
	once    sync.Once
}

// startPeer starts bin with args and env (plus KUBECONFIG) and waits, at most a minute, for healthz to
// answer 200.
func startPeer(ctx context.Context, name, bin, kubeconfig, logDir, healthz string, args, env []string) (*peerProcess, error) {
	p := &peerProcess{name: name, logPath: filepath.Join(logDir, name+".log"), exited: make(chan struct{})}
	logFile, err := os.Create(p.logPath)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(append(os.Environ(), "KUBECONFIG="+kubeconfig), env...)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	var exitErr error
	go func() {
		exitErr = p.cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	deadline := time.NewTimer(time.Minute)
	defer deadline.Stop()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-p.exited:
			return nil, fmt.Errorf("%s exited at start-up (%v); see %s", name, exitErr, p.logPath)
		case <-deadline.C:
			p.kill()
			return nil, fmt.Errorf("%s did not answer %s within a minute; see %s", name, healthz, p.logPath)
		case <-ctx.Done():
			p.kill()
			return nil, ctx.Err()
		case <-tick.C:
			if resp, err := http.Get(healthz); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return p, nil
				}
			}
		}
	}
}

// kill ends the process group and waits for the process.
func (p *peerProcess) kill() {
	p.once.Do(func() { _ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL) })
	<-p.exited
}

func (p *peerProcess) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// freePort returns a TCP port free on 127.0.0.1 right now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// portFree reports whether port can be listened on at 127.0.0.1.
func portFree(port int) bool {
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// managerSupports reports whether the metalheal manager binary has a flag (read from its -help output).
func managerSupports(bin, flag string) bool {
	out, _ := exec.Command(bin, "-help").CombinedOutput()
	return bytes.Contains(out, []byte("-"+flag+" ")) || bytes.Contains(out, []byte("-"+flag+"\n"))
}
