package peers

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
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/internal/testenv"
)

// Build is one of the other ecosystems' managers as hack/build-peers.sh leaves it in ./bin.
type Build struct {
	// Name is the peer's directory under bin/peers and its name in logs.
	Name string
	// Binary is the manager's file name in ./bin.
	Binary string
}

var (
	// ClusterAPI is Cluster API's core manager (its MachineHealthCheck, Machine, MachineSet and Cluster
	// controllers, among others).
	ClusterAPI = Build{Name: "capi", Binary: "capi-manager"}
	// Medik8s is medik8s' node-healthcheck-operator (its NodeHealthCheck).
	Medik8s = Build{Name: "nhc", Binary: "nhc-manager"}
)

// Medik8sWebhookPort is where node-healthcheck-operator serves its webhook: its main fixes 9443.
const Medik8sWebhookPort = 9443

// BinPath is the peer's manager binary.
func (p Build) BinPath() string { return filepath.Join(testenv.RepoRoot(), "bin", p.Binary) }

// ManifestPath is the peer's rendered config/default.
func (p Build) ManifestPath() string {
	return filepath.Join(testenv.RepoRoot(), "bin", "peers", p.Name, "default.yaml")
}

// Manifests is what a peer's config/default renders, split by what is done with it.
type Manifests struct {
	// CRDs are installed with the world, their conversion webhooks pointed at the peer's local process.
	CRDs []*unstructured.Unstructured
	// Install are applied as they are (namespace, service account, roles and bindings), and the webhook
	// configurations, pointed at the peer's local process.
	Install []*unstructured.Unstructured
	// Deployment is the peer's Deployment: where it runs (namespace, service account) and its flags.
	Deployment *unstructured.Unstructured
}

// installedKinds are the kinds of config/default that are applied: who the peer is and what it may do, and
// its admission webhooks. The rest (Deployment, Service, cert-manager's Certificate and Issuer, metrics
// monitors) are about running in a pod, which the peer's local process replaces.
var installedKinds = map[string]bool{
	"Namespace": true, "ServiceAccount": true, "Role": true, "RoleBinding": true, "ClusterRole": true,
	"ClusterRoleBinding": true, "MutatingWebhookConfiguration": true, "ValidatingWebhookConfiguration": true,
}

// Load reads a peer's rendered config/default and points every webhook it declares (admission and CRD
// conversion) at https://127.0.0.1:<port> with caPEM.
func Load(p Build, webhookPort int, caPEM []byte) (*Manifests, error) {
	for _, path := range []string{p.BinPath(), p.ManifestPath()} {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("%s is not built (run `make build-peers`): %w", p.Name, err)
		}
	}
	raw, err := os.ReadFile(p.ManifestPath())
	if err != nil {
		return nil, err
	}
	objs, err := DecodeAll(raw)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", p.ManifestPath(), err)
	}
	m := &Manifests{}
	for _, o := range objs {
		if err := pointWebhooksAt(o, webhookPort, caPEM); err != nil {
			return nil, fmt.Errorf("%s %s: %w", o.GetKind(), o.GetName(), err)
		}
		switch kind := o.GetKind(); {
		case kind == "CustomResourceDefinition":
			m.CRDs = append(m.CRDs, o)
		case kind == "Deployment":
			m.Deployment = o
		case installedKinds[kind]:
			m.Install = append(m.Install, o)
		}
	}
	if m.Deployment == nil {
		return nil, fmt.Errorf("%s renders no Deployment", p.ManifestPath())
	}
	return m, nil
}

// DecodeAll reads a multi-document YAML (or JSON) stream.
func DecodeAll(raw []byte) ([]*unstructured.Unstructured, error) {
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
// our CA.
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

// WriteCRDs writes CRDs as one YAML file, dir/name.yaml, for the world to install.
func WriteCRDs(dir, name string, crds []*unstructured.Unstructured) error {
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

// Apply server-side applies objects with c (the administrator), as fieldOwner.
func Apply(ctx context.Context, c client.Client, fieldOwner string, objs []*unstructured.Unstructured) error {
	for _, o := range objs {
		o = o.DeepCopy()
		if err := c.Patch(ctx, o, client.Apply, client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
			return fmt.Errorf("applying %s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	return nil
}

// RunsAs is where a Deployment runs and as whom: its namespace and the user name of its service account.
func RunsAs(d *unstructured.Unstructured) (namespace, user string, err error) {
	sa, _, err := unstructured.NestedString(d.Object, "spec", "template", "spec", "serviceAccountName")
	if err != nil || sa == "" {
		return "", "", fmt.Errorf("deployment %s has no serviceAccountName", d.GetName())
	}
	return d.GetNamespace(), "system:serviceaccount:" + d.GetNamespace() + ":" + sa, nil
}

// ServiceAccountGroups are the groups a service account of namespace is in.
func ServiceAccountGroups(namespace string) []string {
	return []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace}
}

// envDefault matches a clusterctl variable with a default, "${NAME:=default}".
var envDefault = regexp.MustCompile(`\$\{[A-Za-z0-9_]+:=([^}]*)\}`)

// DeploymentArgs returns the flags the Deployment's first container is started with, clusterctl's
// variables replaced by their defaults (what `clusterctl init` renders when none is set), without the
// flags in drop (matched by name).
func DeploymentArgs(d *unstructured.Unstructured, drop ...string) ([]string, error) {
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

// ClusterAPIArgs are Cluster API's core manager's flags and environment: its Deployment's flags
// (clusterctl's defaults); only what a pod gives it differs: no leader election (a single process, outside
// a pod it could not find its namespace), the webhook server on webhookPort with the certificate in
// certDir, the health probe on healthPort (/readyz), metrics and diagnostics off.
func ClusterAPIArgs(m *Manifests, certDir string, webhookPort, healthPort int) (args, env []string, err error) {
	ns, _, err := RunsAs(m.Deployment)
	if err != nil {
		return nil, nil, err
	}
	args, err = DeploymentArgs(m.Deployment, "--leader-elect", "--diagnostics-address")
	if err != nil {
		return nil, nil, err
	}
	args = append(args,
		"--diagnostics-address=0",
		"--health-addr=127.0.0.1:"+strconv.Itoa(healthPort),
		"--webhook-port="+strconv.Itoa(webhookPort),
		"--webhook-cert-dir="+certDir,
	)
	return args, []string{"POD_NAMESPACE=" + ns, "POD_NAME=capi-controller-manager-0", "POD_UID=local"}, nil
}

// Medik8sArgs are node-healthcheck-operator's flags and environment: its Deployment's flags and
// environment. Differences from a pod: no leader election (outside a pod it could not find its
// namespace), metrics off (its HTTPS metrics would need a port of their own), the health probe on
// healthPort (/readyz), and the webhook certificate where controller-runtime looks by default
// ($TMPDIR/k8s-webhook-server/serving-certs, tmp being TMPDIR: its main only overrides that for OLM's
// injected certificates); its webhook port is fixed (Medik8sWebhookPort).
func Medik8sArgs(m *Manifests, tmp string, healthPort int) (args, env []string, err error) {
	ns, _, err := RunsAs(m.Deployment)
	if err != nil {
		return nil, nil, err
	}
	args, err = DeploymentArgs(m.Deployment, "--leader-elect", "--metrics-bind-address", "--health-probe-bind-address")
	if err != nil {
		return nil, nil, err
	}
	args = append(args,
		"--leader-elect=false",
		"--metrics-bind-address=0",
		"--health-probe-bind-address=127.0.0.1:"+strconv.Itoa(healthPort),
	)
	return args, []string{"DEPLOYMENT_NAMESPACE=" + ns, "POD_NAME=node-healthcheck-controller-manager-0", "TMPDIR=" + tmp}, nil
}

// Medik8sCertDir is where node-healthcheck-operator, run with TMPDIR=tmp, reads its serving certificate.
func Medik8sCertDir(tmp string) string {
	return filepath.Join(tmp, "k8s-webhook-server", "serving-certs")
}

// WebhookPKI is a CA and a serving certificate for 127.0.0.1, which the peers' webhook servers present.
type WebhookPKI struct {
	CAPEM, certPEM, keyPEM []byte
}

// NewWebhookPKI makes a CA and a serving certificate valid from an hour before now for a day.
func NewWebhookPKI(now time.Time) (*WebhookPKI, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "metalheal-peers-ca"},
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
	return &WebhookPKI{
		CAPEM:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

// WriteServingCert writes tls.crt and tls.key into dir (controller-runtime's webhook server's names).
func (p *WebhookPKI) WriteServingCert(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), p.certPEM, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "tls.key"), p.keyPEM, 0o600)
}

// Process is a peer's manager running as its own process, in a process group of its own.
type Process struct {
	Name    string
	LogPath string
	cmd     *exec.Cmd
	exited  chan struct{}
	once    sync.Once
}

// Start starts bin with args and env (plus KUBECONFIG), logging to logDir/name.log, and waits, at most a
// minute, for healthz to answer 200.
func Start(ctx context.Context, name, bin, kubeconfig, logDir, healthz string, args, env []string) (*Process, error) {
	p := &Process{Name: name, LogPath: filepath.Join(logDir, name+".log"), exited: make(chan struct{})}
	logFile, err := os.Create(p.LogPath)
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
			return nil, fmt.Errorf("%s exited at start-up (%v); see %s", name, exitErr, p.LogPath)
		case <-deadline.C:
			p.Kill()
			return nil, fmt.Errorf("%s did not answer %s within a minute; see %s", name, healthz, p.LogPath)
		case <-ctx.Done():
			p.Kill()
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

// PID is the manager's process, the leader of its process group.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Kill ends the process group and waits for the process.
func (p *Process) Kill() {
	p.once.Do(func() { _ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL) })
	<-p.exited
}

// Stop asks the process group to end (SIGTERM), and kills it after grace.
func (p *Process) Stop(grace time.Duration) error {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.exited:
		return nil
	case <-time.After(grace):
		p.Kill()
		return fmt.Errorf("%s did not stop within %s of SIGTERM", p.Name, grace)
	}
}

// Running reports whether the process has not exited.
func (p *Process) Running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// FreePort returns a TCP port free on 127.0.0.1 right now.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// PortFree reports whether port can be listened on at 127.0.0.1.
func PortFree(port int) bool {
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}
