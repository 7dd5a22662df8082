package bmcaccess

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/pkg/bmc"
)

// Field indexes on BMC objects that SetupIndexes registers.
const (
	// IndexHost indexes BMCs by the host they power, as Host.String spells it (ForHost).
	IndexHost = "spec.host"
	// IndexNodeName indexes BMCs by spec.nodeName alone, in whichever cluster (what ForHost says when no
	// BMC powers the host it was asked for).
	IndexNodeName = "spec.nodeName"
	// IndexSecretName indexes BMCs by spec.credentialsSecretRef.name (which BMCs a Secret change concerns).
	IndexSecretName = "spec.credentialsSecretRef.name"
	// IndexCABundle indexes BMCs by the object spec.caBundleRef names, as CABundleIndexValue spells it
	// (which BMCs a Secret or ConfigMap change concerns). BMCs without a reference are not indexed.
	IndexCABundle = "spec.caBundleRef"
)

// CABundleIndexValue is the IndexCABundle value of a BMC whose CA bundle is in the object of this kind and
// name: "Secret/site-ca", "ConfigMap/site-ca".
func CABundleIndexValue(kind v1alpha1.CABundleKind, name string) string {
	return string(kind) + "/" + name
}

// indexes are the field indexes SetupIndexes registers.
var indexes = []struct {
	field   string
	extract client.IndexerFunc
}{
	{IndexHost, func(o client.Object) []string { return []string{HostOf(o.(*v1alpha1.BMC)).String()} }},
	{IndexNodeName, func(o client.Object) []string { return []string{o.(*v1alpha1.BMC).Spec.NodeName} }},
	{IndexSecretName, func(o client.Object) []string { return []string{o.(*v1alpha1.BMC).Spec.CredentialsSecretRef.Name} }},
	{IndexCABundle, func(o client.Object) []string {
		if ref := o.(*v1alpha1.BMC).Spec.CABundleRef; ref != nil {
			return []string{CABundleIndexValue(ref.Kind, ref.Name)}
		}
		return nil
	}},
}

// DefaultCloseTimeout bounds closing a replaced or forgotten driver (a Redfish logout).
const DefaultCloseTimeout = 5 * time.Second

// Options tune an Access.
type Options struct {
	// RequestTimeout bounds one BMC request when the caller's context has no earlier deadline. Zero
	// leaves the drivers' default (bmc.DefaultRequestTimeout).
	RequestTimeout time.Duration
	// CloseTimeout bounds closing a driver that is replaced or forgotten. Zero means DefaultCloseTimeout.
	CloseTimeout time.Duration
}

// Access resolves BMC objects to drivers and caches one driver per BMC. It is safe for concurrent use;
// share one between every controller of a manager.
type Access struct {
	client    client.Reader
	namespace string
	registry  *bmc.Registry
	opts      Options
	// log is what drivers report through (see build).
	log logr.Logger

	indexOnce sync.Once
	indexErr  error

	mu      sync.Mutex
	drivers map[types.UID]*entry
}

// entry is a cached driver and what it was built from.
type entry struct {
	driver          bmc.Driver
	generation      int64
	secretVersion   string
	caBundleVersion string
}

// Inputs are the objects a BMC's driver is built from, as the cache holds them: its credentials Secret
// and the CA bundle its spec.caBundleRef names. Read returns them; a controller compares their versions to
// those it last checked, to notice rotated credentials or a replaced bundle, and hands them to
// ForBMCWithInputs: at thousands of BMCs a check reads each object once, not twice.
type Inputs struct {
	// Secret is the credentials Secret, nil when it does not exist. It is the cache's object: do not
	// modify it.
	Secret *corev1.Secret
	// CABundle is the PEM the BMC's spec.caBundleRef names, nil when it names none. It may be the cache's:
	// do not modify it.
	CABundle []byte
	// CABundleVersion identifies the bundle's object and its resourceVersion ("ConfigMap/site-ca@123"),
	// empty when the BMC names none; it changes when the bundle is edited, replaced or appears.
	CABundleVersion string
	// caBundleErr is why the bundle the BMC names cannot be read (its object or key is missing).
	caBundleErr error
}

// SecretVersion is the Secret's resourceVersion, empty when it is missing.
func (in Inputs) SecretVersion() string {
	if in.Secret == nil {
		return ""
	}
	return in.Secret.ResourceVersion
}

// New returns an Access that reads BMCs and Secrets through c, only in namespace, and builds drivers
// with registry. c should be the manager's cache-backed client.
func New(c client.Reader, namespace string, registry *bmc.Registry, opts Options) *Access {
	if opts.CloseTimeout <= 0 {
		opts.CloseTimeout = DefaultCloseTimeout
	}
	return &Access{client: c, namespace: namespace, registry: registry, opts: opts, drivers: map[types.UID]*entry{},
		log: ctrl.Log.WithName("bmcaccess")}
}

// Namespace is the namespace the Access reads BMCs and Secrets in.
func (a *Access) Namespace() string { return a.namespace }

// SetupIndexes registers IndexNodeName and IndexSecretName with indexer (the manager's field indexer).
// Every controller using the Access may call it: only the first call registers, later ones return its
// result.
func (a *Access) SetupIndexes(ctx context.Context, indexer client.FieldIndexer) error {
	a.indexOnce.Do(func() {
		for _, ix := range indexes {
			if err := indexer.IndexField(ctx, &v1alpha1.BMC{}, ix.field, ix.extract); err != nil {
				a.indexErr = fmt.Errorf("indexing BMCs by %s: %w", ix.field, err)
				return
			}
		}
	})
	return a.indexErr
}

// Host is one host, known by its Node: a Node of the cluster the manager runs in (Cluster is zero), or of
// a Cluster API workload cluster (Cluster names the Cluster, in the management cluster). Node names
// repeat across clusters: two clusters' worker-0 are two hosts, with two BMCs.
type Host struct {
	Cluster types.NamespacedName
	Node    string
}

// HostOf is the host a BMC powers: spec.nodeName, in spec.cluster when it names one.
func HostOf(b *v1alpha1.BMC) Host {
	h := Host{Node: b.Spec.NodeName}
	if c := b.Spec.Cluster; c != nil {
		h.Cluster = types.NamespacedName{Namespace: c.Namespace, Name: c.Name}
	}
	return h
}

// String spells the host as "node" for a Node of this cluster, "namespace/cluster/node" for one of a
// workload cluster: no two hosts spell the same (neither part of a cluster's name holds a slash).
func (h Host) String() string {
	if h.Cluster.Name == "" {
		return h.Node
	}
	return h.Cluster.String() + "/" + h.Node
}

// ForHost returns the BMC that powers host, and its driver. It fails with ErrBMCNotFound when no BMC
// powers the host (naming, if any, the BMCs of Nodes of that name in other clusters: a BMC is never
// guessed from a node name), with ErrBMCAmbiguous when more than one does; otherwise as ForBMC.
func (a *Access) ForHost(ctx context.Context, host Host) (*v1alpha1.BMC, bmc.Driver, error) {
	var list v1alpha1.BMCList
	if err := a.client.List(ctx, &list, client.InNamespace(a.namespace), client.MatchingFields{IndexHost: host.String()}); err != nil {
		return nil, nil, fmt.Errorf("listing BMCs of host %q: %w", host, err)
	}
	switch len(list.Items) {
	case 0:
		return nil, nil, &Error{Node: host.String(), Kind: ErrBMCNotFound, Err: a.noBMCFor(ctx, host)}
	case 1:
	default:
		names := make([]string, 0, len(list.Items))
		for _, b := range list.Items {
			names = append(names, b.Name)
		}
		slices.Sort(names)
		return nil, nil, &Error{Node: host.String(), Kind: ErrBMCAmbiguous,
			Err: fmt.Errorf("%d BMCs in namespace %q power this host (%v); exactly one must", len(names), a.namespace, names)}
	}
	b := list.Items[0].DeepCopy()
	d, err := a.ForBMC(ctx, b)
	if err != nil {
		return b, nil, err
	}
	return b, d, nil
}

// noBMCFor says why no BMC powers host, naming the BMCs of Nodes of the same name in other clusters.
func (a *Access) noBMCFor(ctx context.Context, host Host) error {
	where := "this cluster"
	if host.Cluster.Name != "" {
		where = "cluster " + host.Cluster.String()
	}
	var list v1alpha1.BMCList
	if err := a.client.List(ctx, &list, client.InNamespace(a.namespace), client.MatchingFields{IndexNodeName: host.Node}); err != nil || len(list.Items) == 0 {
		return fmt.Errorf("no BMC in namespace %q has spec.nodeName %q in %s", a.namespace, host.Node, where)
	}
	others := make([]string, 0, len(list.Items))
	for i := range list.Items {
		b := &list.Items[i]
		other := "this cluster"
		if h := HostOf(b); h.Cluster.Name != "" {
			other = "cluster " + h.Cluster.String()
		}
		others = append(others, fmt.Sprintf("%s (%s)", b.Name, other))
	}
	slices.Sort(others)
	return fmt.Errorf("no BMC in namespace %q powers node %q of %s; BMCs of Nodes of that name in other clusters: %s (spec.cluster tells them apart)",
		a.namespace, host.Node, where, strings.Join(others, ", "))
}

// Secret returns b's credentials Secret as the cache holds it, nil when it does not exist (or b is outside
// the Access's namespace). It is not a deep copy and must not be modified. A controller compares its
// resourceVersion to the one it last checked, to notice rotated credentials, and hands what Read returned
// to ForBMCWithInputs: at thousands of BMCs a check reads the Secret once, not twice (a cached read of a
// Secret, which is cached for one namespace only, maps its kind through the RESTMapper every time).
func (a *Access) Secret(ctx context.Context, b *v1alpha1.BMC) (*corev1.Secret, error) {
	if b.Namespace != a.namespace {
		return nil, nil
	}
	secret := &corev1.Secret{}
	err := a.client.Get(ctx, types.NamespacedName{Namespace: a.namespace, Name: b.Spec.CredentialsSecretRef.Name}, secret, client.UnsafeDisableDeepCopy)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading credentials Secret of BMC %s: %w", klog.KObj(b), err)
	}
	return secret, nil
}

// CABundle returns the PEM b's spec.caBundleRef names, as the cache holds it (do not modify it), and the
// version of the object it is in (see Inputs.CABundleVersion). It returns nil and "" when b names no bundle, and an
// *Error of kind ErrCABundleNotFound when the object or its key is missing.
func (a *Access) CABundle(ctx context.Context, b *v1alpha1.BMC) ([]byte, string, error) {
	ref := b.Spec.CABundleRef
	if ref == nil {
		return nil, "", nil
	}
	bmcKey := types.NamespacedName{Namespace: b.Namespace, Name: b.Name}
	notFound := func(version, format string, args ...any) ([]byte, string, error) {
		return nil, version, &Error{BMC: bmcKey, Kind: ErrCABundleNotFound, Err: fmt.Errorf(format, args...)}
	}
	if b.Namespace != a.namespace {
		return notFound("", "the BMC is outside namespace %q, the only one whose Secrets and ConfigMaps metalheal reads", a.namespace)
	}
	objKey := types.NamespacedName{Namespace: a.namespace, Name: ref.Name}
	dataKey := ref.KeyOrDefault()
	var obj client.Object
	switch ref.Kind {
	case v1alpha1.CABundleSecret:
		obj = &corev1.Secret{}
	case v1alpha1.CABundleConfigMap:
		obj = &corev1.ConfigMap{}
	default: // admission refuses other kinds
		return notFound("", "spec.caBundleRef.kind %q is neither Secret nor ConfigMap", ref.Kind)
	}
	err := a.client.Get(ctx, objKey, obj, client.UnsafeDisableDeepCopy)
	switch {
	case apierrors.IsNotFound(err):
		return notFound("", "%s %q does not exist in namespace %q", ref.Kind, ref.Name, a.namespace)
	case err != nil:
		return nil, "", fmt.Errorf("reading the CA bundle %s %q of BMC %s: %w", ref.Kind, ref.Name, klog.KObj(b), err)
	}
	version := CABundleIndexValue(ref.Kind, ref.Name) + "@" + obj.GetResourceVersion()
	var pem []byte
	var found bool
	switch o := obj.(type) {
	case *corev1.Secret:
		pem, found = o.Data[dataKey]
	case *corev1.ConfigMap:
		var text string
		if text, found = o.Data[dataKey]; found {
			pem = []byte(text)
		} else {
			pem, found = o.BinaryData[dataKey]
		}
	}
	if !found {
		return notFound(version, "%s %q in namespace %q has no key %q", ref.Kind, ref.Name, a.namespace, dataKey)
	}
	return pem, version, nil
}

// Read returns b's Inputs as the cache holds them. A missing Secret or bundle is not an error here
// (ForBMCWithInputs reports it); an API error is.
func (a *Access) Read(ctx context.Context, b *v1alpha1.BMC) (Inputs, error) {
	secret, err := a.Secret(ctx, b)
	if err != nil {
		return Inputs{}, err
	}
	in := Inputs{Secret: secret}
	in.CABundle, in.CABundleVersion, in.caBundleErr = a.CABundle(ctx, b)
	if in.caBundleErr != nil && Reason(in.caBundleErr) == "" {
		return Inputs{}, in.caBundleErr
	}
	return in, nil
}

// ForBMC returns the driver of b, built on first use and cached until b's generation, its Secret's
// resourceVersion or its CA bundle's version changes. It fails with ErrSecretNotFound,
// ErrInvalidCredentials, ErrCABundleNotFound, ErrCABundleInvalid, ErrInvalidAddress or bmc.ErrUnsupported
// (see Error), or with the API error that kept it from reading the Secret or the bundle.
func (a *Access) ForBMC(ctx context.Context, b *v1alpha1.BMC) (bmc.Driver, error) {
	in, err := a.Read(ctx, b)
	if err != nil {
		return nil, err
	}
	return a.ForBMCWithInputs(ctx, b, in)
}

// ForBMCWithInputs is ForBMC with b's Inputs as Read returned them.
func (a *Access) ForBMCWithInputs(ctx context.Context, b *v1alpha1.BMC, in Inputs) (bmc.Driver, error) {
	key := types.NamespacedName{Namespace: b.Namespace, Name: b.Name}
	fail := func(kind, err error) (bmc.Driver, error) { return nil, &Error{BMC: key, Kind: kind, Err: err} }
	if b.Namespace != a.namespace {
		return fail(ErrSecretNotFound, fmt.Errorf("the BMC is outside namespace %q, the only one whose Secrets metalheal reads", a.namespace))
	}
	secret := in.Secret
	if secret == nil {
		a.drop(ctx, b)
		return fail(ErrSecretNotFound, fmt.Errorf("secret %q does not exist in namespace %q", b.Spec.CredentialsSecretRef.Name, a.namespace))
	}
	if in.caBundleErr != nil {
		a.drop(ctx, b) // it verified against a bundle that is gone
		return nil, in.caBundleErr
	}

	// Only the versions are compared; build copies the credentials and the bundle out of the objects.
	a.mu.Lock()
	cached := a.drivers[b.UID]
	if cached != nil && (cached.generation > b.Generation ||
		(cached.generation == b.Generation && cached.secretVersion == secret.ResourceVersion && cached.caBundleVersion == in.CABundleVersion)) {
		// Up to date, or built from a newer BMC than a stale cache handed this caller: keep it.
		a.mu.Unlock()
		return cached.driver, nil
	}
	d, err := a.build(ctx, b, secret, in.CABundle)
	if err != nil {
		a.mu.Unlock()
		a.drop(ctx, b) // it was built from a spec, credentials or a bundle that are gone
		return nil, err
	}
	a.drivers[b.UID] = &entry{driver: d, generation: b.Generation, secretVersion: secret.ResourceVersion, caBundleVersion: in.CABundleVersion}
	a.mu.Unlock()

	log := ctrl.LoggerFrom(ctx).WithValues("BMC", klog.KObj(b))
	if cached != nil {
		log.V(2).Info("Rebuilt BMC driver", "generation", b.Generation, "secretResourceVersion", secret.ResourceVersion, "caBundle", in.CABundleVersion)
		a.closeDriver(ctx, b, cached.driver)
	} else {
		log.V(4).Info("Built BMC driver", "generation", b.Generation, "secretResourceVersion", secret.ResourceVersion, "caBundle", in.CABundleVersion)
	}
	return d, nil
}

// build makes b's driver from its Secret and CA bundle (nil: none). a.mu is held; nothing here contacts
// the BMC.
func (a *Access) build(ctx context.Context, b *v1alpha1.BMC, secret *corev1.Secret, caBundle []byte) (bmc.Driver, error) {
	key := types.NamespacedName{Namespace: b.Namespace, Name: b.Name}
	creds, err := bmc.CredentialsFromSecretData(secret.Data)
	if err != nil {
		return nil, &Error{BMC: key, Kind: ErrInvalidCredentials, Err: fmt.Errorf("secret %q: %w", secret.Name, err)}
	}
	if ref := b.Spec.CABundleRef; ref != nil {
		// Checked here, whatever the driver, so that a bad bundle is reported as such (and not as a BMC
		// that cannot be used as addressed) before any connection is tried.
		if _, err := bmc.ParseCABundle(caBundle); err != nil {
			return nil, &Error{BMC: key, Kind: ErrCABundleInvalid,
				Err: fmt.Errorf("key %q of %s %q: %w", ref.KeyOrDefault(), ref.Kind, ref.Name, err)}
		}
	}
	forms := secretForms(creds)
	// The driver outlives this reconcile and reports during later ones: it logs through a logger without
	// this reconcile's values, naming the BMC on each line. (A logger with values holds an encoded copy of
	// them, kilobytes that every cached driver would keep: megabytes at thousands of BMCs.)
	log, ref := a.log, klog.KObj(b)
	d, err := a.registry.New(b.Spec.Address, creds, bmc.Options{
		DisableCertificateVerification: b.Spec.DisableCertificateVerification,
		CABundle:                       slices.Clone(caBundle), // the driver may keep it; caBundle may be the cache's
		RequestTimeout:                 a.opts.RequestTimeout,
		// Drivers report credential-free messages (a session re-established, a fallback taken); scrub anyway.
		Report: func(reason, message string) { log.V(1).Info(scrub(message, forms), "reason", reason, "BMC", ref) },
	})
	if err != nil {
		err = redact(err, forms)
		var addrErr *bmc.AddressError
		var schemeErr *bmc.UnknownSchemeError
		if errors.As(err, &addrErr) || errors.As(err, &schemeErr) {
			return nil, &Error{BMC: key, Kind: ErrInvalidAddress, Err: err}
		}
		return nil, &Error{BMC: key, Kind: bmc.ErrUnsupported, Err: err}
	}
	return &redacting{next: d, forms: forms}, nil
}

// drop closes and forgets b's cached driver, if any.
func (a *Access) drop(ctx context.Context, b *v1alpha1.BMC) {
	a.mu.Lock()
	cached := a.drivers[b.UID]
	delete(a.drivers, b.UID)
	a.mu.Unlock()
	if cached != nil {
		a.closeDriver(ctx, b, cached.driver)
	}
}

// Forget closes and drops the cached driver of the BMC with this UID (a deleted BMC). It is a no-op
// when none is cached.
func (a *Access) Forget(ctx context.Context, uid types.UID) {
	a.mu.Lock()
	cached := a.drivers[uid]
	delete(a.drivers, uid)
	a.mu.Unlock()
	if cached != nil {
		a.closeDriver(ctx, nil, cached.driver)
	}
}

// CloseAll closes and drops every cached driver.
func (a *Access) CloseAll(ctx context.Context) {
	a.mu.Lock()
	all := a.drivers
	a.drivers = map[types.UID]*entry{}
	a.mu.Unlock()
	for _, e := range all {
		a.closeDriver(ctx, nil, e.driver)
	}
}

// Start implements manager.Runnable: it waits for the manager to stop, then logs out of every session
// the cached drivers hold, bounded by the close timeout (BMCs have few session slots: do not leak them
// on every restart).
func (a *Access) Start(ctx context.Context) error {
	<-ctx.Done()
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.opts.CloseTimeout)
	defer cancel()
	a.CloseAll(closeCtx)
	return nil
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: closing drivers is every replica's job.
func (a *Access) NeedLeaderElection() bool { return false }

// closeDriver closes d, bounded by the close timeout. A failure is only logged: the BMC will expire the
// session on its own.
func (a *Access) closeDriver(ctx context.Context, b *v1alpha1.BMC, d bmc.Driver) {
	ctx, cancel := context.WithTimeout(ctx, a.opts.CloseTimeout)
	defer cancel()
	if err := d.Close(ctx); err != nil {
		log := ctrl.LoggerFrom(ctx)
		if b != nil {
			log = log.WithValues("BMC", klog.KObj(b))
		}
		log.V(2).Info("Closing a BMC driver failed", "error", err.Error())
	}
}

// redacting scrubs the credentials from every error of the driver it wraps.
type redacting struct {
	next  bmc.Driver
	forms []string
}

func (r *redacting) PowerState(ctx context.Context) (bmc.PowerState, error) {
	s, err := r.next.PowerState(ctx)
	return s, redact(err, r.forms)
}

func (r *redacting) PowerOn(ctx context.Context) error {
	return redact(r.next.PowerOn(ctx), r.forms)
}

func (r *redacting) PowerOff(ctx context.Context, force bool) error {
	return redact(r.next.PowerOff(ctx, force), r.forms)
}

func (r *redacting) Diagnose(ctx context.Context) error {
	return redact(bmc.Diagnose(ctx, r.next), r.forms)
}

func (r *redacting) WatchPower(ctx context.Context, changed func()) error {
	return redact(bmc.WatchPower(ctx, r.next, changed), r.forms)
}

func (r *redacting) Close(ctx context.Context) error {
	return redact(r.next.Close(ctx), r.forms)
}
