package v1alpha1_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/testenv"
)

const ns = "metalheal-system"

var (
	k8s client.Client
	// cfg reaches the API server: for reads as a table (kubectl get's printer columns).
	cfg *rest.Config
)

func TestMain(m *testing.M) {
	env, c, err := testenv.Start(testenv.Options{})
	cfg = c
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1alpha1.AddToScheme(scheme)
	k8s, err = client.New(cfg, client.Options{Scheme: scheme})
	if err == nil {
		err = k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	code := 1
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
	} else {
		code = m.Run()
	}
	_ = env.Stop()
	os.Exit(code)
}

// decodeAll reads every object of a multi-document YAML file.
func decodeAll(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if err.Error() == "EOF" {
				return out
			}
			t.Fatalf("%s: %v", path, err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

func fromYAML(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(doc), 4096).Decode(&u.Object); err != nil {
		t.Fatalf("bad test YAML: %v\n%s", err, doc)
	}
	return u
}

func TestSamplesAreAccepted(t *testing.T) {
	g := NewWithT(t)
	paths, err := filepath.Glob(filepath.Join(testenv.RepoRoot(), "config", "samples", "*.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	kinds := map[string]bool{}
	for _, p := range paths {
		if filepath.Base(p) == "kustomization.yaml" {
			continue
		}
		for _, obj := range decodeAll(t, p) {
			if group := obj.GroupVersionKind().Group; group != "" && group != v1alpha1.GroupVersion.Group {
				// A peer's object (Cluster API's, medik8s' MachineHealthCheck or NodeHealthCheck naming our
				// template): their CRDs are not served here; the interop suite applies those samples.
				continue
			}
			g.Expect(k8s.Create(context.Background(), obj)).To(Succeed(), "%s %s/%s from %s", obj.GetKind(), obj.GetNamespace(), obj.GetName(), p)
			kinds[obj.GetKind()] = true
		}
	}
	g.Expect(kinds).To(HaveKey("NodeHealthCheck"))
	g.Expect(kinds).To(HaveKey("PowerCycleRemediationTemplate"))
	g.Expect(kinds).To(HaveKey("BMC"))
	g.Expect(kinds).To(HaveKey("Secret"))
}

// Valid objects, each invalid case below changes one thing about one of them.
const (
	validMHC = `
apiVersion: remediation.metalheal.io/v1alpha1
kind: MachineHealthCheck
metadata: {name: NAME, namespace: metalheal-system}
spec:
  clusterName: prod
  selector: {matchLabels: {pool: a}}
  unhealthyConditions: [{type: Ready, status: Unknown, timeout: 300s}]
`
	validNHC = `
apiVersion: remediation.metalheal.io/v1alpha1
kind: NodeHealthCheck
metadata: {name: NAME}
spec:
  remediationTemplate: {apiVersion: remediation.metalheal.io/v1alpha1, kind: PowerCycleRemediationTemplate, name: t, namespace: metalheal-system}
`
	validTemplate = `
apiVersion: remediation.metalheal.io/v1alpha1
kind: PowerCycleRemediationTemplate
metadata: {name: NAME, namespace: metalheal-system}
spec: {template: {spec: {strategy: escalate}}}
`
	validBMC = `
apiVersion: remediation.metalheal.io/v1alpha1
kind: BMC
metadata: {name: NAME, namespace: metalheal-system}
spec:
  nodeName: worker-1
  address: redfish://10.0.0.1/redfish/v1/Systems/1
  credentialsSecretRef: {name: creds}
`
)

// with returns a copy of base (YAML or an object) with the dotted field path set to value (nil removes it).
func with(t *testing.T, base any, path string, value any) *unstructured.Unstructured {
	t.Helper()
	var u *unstructured.Unstructured
	switch b := base.(type) {
	case string:
		u = fromYAML(t, b)
	case *unstructured.Unstructured:
		u = b.DeepCopy()
	default:
		t.Fatalf("bad base %T", base)
	}
	fields := strings.Split(path, ".")
	if value == nil {
		unstructured.RemoveNestedField(u.Object, fields...)
	} else if err := unstructured.SetNestedField(u.Object, runtime.DeepCopyJSONValue(value), fields...); err != nil {
		t.Fatalf("setting %s: %v", path, err)
	}
	return u
}

func TestInvalidObjectsAreRefused(t *testing.T) {
	tmplRef := func(order int64) map[string]any {
		return map[string]any{"order": order, "timeout": "10m", "remediationTemplate": map[string]any{
			"apiVersion": "remediation.metalheal.io/v1alpha1", "kind": "PowerCycleRemediationTemplate", "name": "t", "namespace": ns}}
	}
	cases := []struct {
		name string
		obj  *unstructured.Unstructured
		want []string // substrings of the API server's message: the field path and the explanation
	}{
		// MachineHealthCheck
		{"mhc maxUnhealthy 120%", with(t, validMHC, "spec.maxUnhealthy", "120%"), []string{"spec.maxUnhealthy", "percentage from 0% to 100%"}},
		{"mhc maxUnhealthy abc", with(t, validMHC, "spec.maxUnhealthy", "abc"), []string{"spec.maxUnhealthy", "non-negative integer or a percentage"}},
		{"mhc maxUnhealthy negative", with(t, validMHC, "spec.maxUnhealthy", int64(-1)), []string{"spec.maxUnhealthy", "non-negative integer"}},
		{"mhc empty selector", with(t, validMHC, "spec.selector", map[string]any{}), []string{"spec.selector", "selector must not be empty"}},
		{"mhc missing selector", with(t, validMHC, "spec.selector", nil), []string{"spec.selector", "Required value"}},
		{"mhc negative timeout", with(t, validMHC, "spec.unhealthyConditions", []any{map[string]any{"type": "Ready", "status": "Unknown", "timeout": "-5m"}}), []string{"spec.unhealthyConditions[0].timeout", "must be a duration such as 300s"}},
		{"mhc unparsable timeout", with(t, validMHC, "spec.unhealthyConditions", []any{map[string]any{"type": "Ready", "status": "Unknown", "timeout": "five minutes"}}), []string{"spec.unhealthyConditions[0].timeout", "must be a duration such as 300s"}},
		{"mhc unknown condition status", with(t, validMHC, "spec.unhealthyConditions", []any{map[string]any{"type": "Ready", "status": "Maybe", "timeout": "5m"}}), []string{"spec.unhealthyConditions[0].status", "Unsupported value"}},
		{"mhc nodeStartupTimeout 10s", with(t, validMHC, "spec.nodeStartupTimeout", "10s"), []string{"spec.nodeStartupTimeout", "0s (disabled) or at least 30s"}},
		{"mhc unhealthyRange malformed", with(t, validMHC, "spec.unhealthyRange", "3-5"), []string{"spec.unhealthyRange", "inclusive range like [3-5]"}},
		{"mhc unhealthyRange min > max", with(t, validMHC, "spec.unhealthyRange", "[5-3]"), []string{"spec.unhealthyRange", "min <= max"}},
		{"mhc template and escalations", with(t, with(t, validMHC, "spec.escalatingRemediations", []any{tmplRef(1)}), "spec.remediationTemplate", tmplRef(1)["remediationTemplate"]), []string{"spec", "remediationTemplate or escalatingRemediations, not both"}},
		{"mhc backoff initial 0 while on", with(t, validMHC, "spec.remediationBackoff", map[string]any{"after": int64(2), "initial": "0s"}), []string{"spec.remediationBackoff", "initial must be more than 0s unless after is 0"}},
		{"mhc escalation orders duplicate", with(t, validMHC, "spec.escalatingRemediations", []any{tmplRef(2), tmplRef(2)}), []string{"spec.escalatingRemediations", "distinct order values"}},
		// NodeHealthCheck
		{"nhc both minHealthy and maxUnhealthy", with(t, with(t, validNHC, "spec.minHealthy", "51%"), "spec.maxUnhealthy", "49%"), []string{"spec", "minHealthy or maxUnhealthy, not both"}},
		{"nhc minHealthy 101%", with(t, validNHC, "spec.minHealthy", "101%"), []string{"spec.minHealthy", "percentage from 0% to 100%"}},
		{"nhc neither template nor escalations", with(t, validNHC, "spec.remediationTemplate", nil), []string{"spec", "exactly one of remediationTemplate or escalatingRemediations"}},
		{"nhc template without namespace", with(t, validNHC, "spec.remediationTemplate.namespace", nil), []string{"spec.remediationTemplate", "namespace is required"}},
		{"nhc template kind without Template suffix", with(t, validNHC, "spec.remediationTemplate.kind", "PowerCycleRemediation"), []string{"spec.remediationTemplate", "ending in 'Template'"}},
		{"nhc duplicate escalation orders", with(t, with(t, validNHC, "spec.remediationTemplate", nil), "spec.escalatingRemediations", []any{tmplRef(1), tmplRef(1)}), []string{"spec.escalatingRemediations", "distinct order values"}},
		{"nhc escalation timeout too short", with(t, with(t, validNHC, "spec.remediationTemplate", nil), "spec.escalatingRemediations", []any{map[string]any{"order": int64(1), "timeout": "10s", "remediationTemplate": tmplRef(1)["remediationTemplate"]}}), []string{"spec.escalatingRemediations[0].timeout", "at least 1m"}},
		{"nhc empty selector", with(t, validNHC, "spec.selector", map[string]any{}), []string{"spec.selector", "selector must not be empty"}},
		{"nhc malformed healthyDelay", with(t, validNHC, "spec.healthyDelay", "--1s"), []string{"spec.healthyDelay", "must be a duration such as 300s", "manually-confirmed-healthy"}},
		{"mhc malformed healthyDelay", with(t, validMHC, "spec.healthyDelay", "1 m"), []string{"spec.healthyDelay", "must be a duration such as 300s"}},
		{"nhc unparsable duration", with(t, validNHC, "spec.unhealthyConditions", []any{map[string]any{"type": "Ready", "status": "False", "duration": "abc"}}), []string{"spec.unhealthyConditions[0].duration", "must be a duration such as 300s"}},
		{"nhc backoff initial > max", with(t, validNHC, "spec.remediationBackoff", map[string]any{"initial": "3h", "max": "1h"}), []string{"spec.remediationBackoff", "initial must not exceed remediationBackoff.max"}},
		{"nhc backoff after 11", with(t, validNHC, "spec.remediationBackoff", map[string]any{"after": int64(11)}), []string{"spec.remediationBackoff.after", "less than or equal to 10"}},
		{"nhc backoff window 0 while on", with(t, validNHC, "spec.remediationBackoff", map[string]any{"window": "0s"}), []string{"spec.remediationBackoff", "window must be more than 0s unless after is 0"}},
		{"nhc empty pause request", with(t, validNHC, "spec.pauseRequests", []any{""}), []string{"spec.pauseRequests[0]", "at least 1 chars long"}},
		// PowerCycleRemediationTemplate
		{"template unknown strategy", with(t, validTemplate, "spec.template.spec.strategy", "explode"), []string{"spec.template.spec.strategy", "Unsupported value", "reboot", "escalate", "power-off"}},
		{"template deleteAfterRetries 0", with(t, validTemplate, "spec.template.spec.deleteAfterRetries", int64(0)), []string{"spec.template.spec.deleteAfterRetries", "greater than or equal to 1"}},
		{"template powerOffTimeoutSeconds negative", with(t, validTemplate, "spec.template.spec.powerOffTimeoutSeconds", int64(-1)), []string{"spec.template.spec.powerOffTimeoutSeconds", "greater than or equal to 5"}},
		{"template backoff max < initial", with(t, validTemplate, "spec.template.spec.retryBackoff", map[string]any{"initial": "5m", "max": "1m"}), []string{"spec.template.spec.retryBackoff", "max must be at least retryBackoff.initial"}},
		{"template missing template", with(t, validTemplate, "spec.template", nil), []string{"spec.template", "Required value"}},
		{"template diagnostic wait 5s", with(t, validTemplate, "spec.template.spec.diagnosticInterrupt", map[string]any{"timeoutSeconds": int64(5)}), []string{"spec.template.spec.diagnosticInterrupt.timeoutSeconds", "greater than or equal to 10"}},
		{"template diagnostic wait 2h", with(t, validTemplate, "spec.template.spec.diagnosticInterrupt", map[string]any{"timeoutSeconds": int64(7200)}), []string{"spec.template.spec.diagnosticInterrupt.timeoutSeconds", "less than or equal to 3600"}},
		{"template graceful wait 0s", with(t, validTemplate, "spec.template.spec.gracefulShutdown", map[string]any{"timeoutSeconds": int64(0)}), []string{"spec.template.spec.gracefulShutdown.timeoutSeconds", "greater than or equal to 5"}},
		{"template graceful wait 1h", with(t, validTemplate, "spec.template.spec.gracefulShutdown", map[string]any{"timeoutSeconds": int64(3600)}), []string{"spec.template.spec.gracefulShutdown.timeoutSeconds", "less than or equal to 1800"}},
		// BMC
		{"bmc unknown scheme", with(t, validBMC, "spec.address", "ftp://10.0.0.1/"), []string{"spec.address", "scheme must be one of"}},
		{"bmc no host", with(t, validBMC, "spec.address", "redfish:///redfish/v1/Systems/1"), []string{"spec.address", "must name a host"}},
		{"bmc two final dots", with(t, validBMC, "spec.address", "redfish://bmc-7.example.com../"), []string{"spec.address", "must name a host"}},
		{"bmc bare address with path", with(t, validBMC, "spec.address", "10.0.0.1/redfish"), []string{"spec.address", "IPMI host or host:port"}},
		{"bmc missing credentials ref", with(t, validBMC, "spec.credentialsSecretRef", nil), []string{"spec.credentialsSecretRef", "Required value"}},
		{"bmc empty credentials name", with(t, validBMC, "spec.credentialsSecretRef.name", ""), []string{"spec.credentialsSecretRef.name"}},
		{"bmc missing nodeName", with(t, validBMC, "spec.nodeName", nil), []string{"spec.nodeName", "Required value"}},
		{"bmc empty address", with(t, validBMC, "spec.address", ""), []string{"spec.address"}},
		{"bmc caBundleRef with verification disabled", with(t, with(t, validBMC, "spec.disableCertificateVerification", true), "spec.caBundleRef", map[string]any{"kind": "ConfigMap", "name": "site-ca"}), []string{"spec", "caBundleRef and disableCertificateVerification: true exclude each other"}},
		{"bmc caBundleRef unknown kind", with(t, validBMC, "spec.caBundleRef", map[string]any{"kind": "Namespace", "name": "site-ca"}), []string{"spec.caBundleRef.kind", "Unsupported value", "Secret", "ConfigMap"}},
		{"bmc caBundleRef without name", with(t, validBMC, "spec.caBundleRef", map[string]any{"kind": "Secret"}), []string{"spec.caBundleRef.name", "Required value"}},
		{"bmc powerWatch poll every 2s", with(t, validBMC, "spec.powerWatch", map[string]any{"pollIntervalSeconds": int64(2)}), []string{"spec.powerWatch.pollIntervalSeconds", "from 5 to 3600 seconds"}},
		{"bmc powerWatch poll every 2h", with(t, validBMC, "spec.powerWatch", map[string]any{"pollIntervalSeconds": int64(7200)}), []string{"spec.powerWatch.pollIntervalSeconds", "from 5 to 3600 seconds"}},
		{"bmc powerWatch unknown eventStream", with(t, validBMC, "spec.powerWatch", map[string]any{"eventStream": "Always"}), []string{"spec.powerWatch.eventStream", "Unsupported value", "Auto", "Disabled"}},
		{"bmc caBundleRef bad key", with(t, validBMC, "spec.caBundleRef", map[string]any{"kind": "Secret", "name": "site-ca", "key": "ca/crt"}), []string{"spec.caBundleRef.key", "alphanumeric characters, '-', '_' or '.'"}},
	}
	if len(cases) < 25 {
		t.Fatalf("the table must cover at least 25 invalid objects, has %d", len(cases))
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			tc.obj.SetName(fmt.Sprintf("invalid-%d", i))
			err := k8s.Create(context.Background(), tc.obj, client.DryRunAll)
			g.Expect(err).To(HaveOccurred(), "the API server accepted an invalid object")
			g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want a validation error, got %v", err)
			t.Logf("refused: %v", err)
			for _, w := range tc.want {
				g.Expect(err.Error()).To(ContainSubstring(w))
			}
		})
	}
}

func TestDefaultsAreApplied(t *testing.T) {
	ctx := context.Background()
	g := NewWithT(t)

	nhc := with(t, validNHC, "metadata.name", "defaults")
	g.Expect(k8s.Create(ctx, nhc)).To(Succeed())
	var gotNHC v1alpha1.NodeHealthCheck
	g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "defaults"}, &gotNHC)).To(Succeed())
	g.Expect(gotNHC.Spec.Selector).To(Equal(&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "node-role.kubernetes.io/worker", Operator: metav1.LabelSelectorOpExists}}}))
	g.Expect(gotNHC.Spec.UnhealthyConditions).To(ConsistOf(
		v1alpha1.NodeUnhealthyCondition{Type: "Ready", Status: "False", Duration: metav1.Duration{Duration: 300 * time.Second}},
		v1alpha1.NodeUnhealthyCondition{Type: "Ready", Status: "Unknown", Duration: metav1.Duration{Duration: 300 * time.Second}},
	))
	g.Expect(gotNHC.Spec.HealthyDelay).To(Equal(&metav1.Duration{}))
	g.Expect(gotNHC.Spec.StormCooldownDuration).To(Equal(&metav1.Duration{}))
	g.Expect(gotNHC.Spec.MaxUnhealthy).To(BeNil(), "maxUnhealthy is not defaulted in the schema: 49% applies when neither it nor minHealthy is set")
	defaultBackoff := &v1alpha1.RemediationBackoff{After: ptrTo(int32(3)), Window: &metav1.Duration{Duration: 6 * time.Hour},
		Initial: &metav1.Duration{Duration: 15 * time.Minute}, Max: &metav1.Duration{Duration: 2 * time.Hour}}
	g.Expect(gotNHC.Spec.RemediationBackoff).To(Equal(defaultBackoff), "the repeat-remediation back-off is on by default")

	mhc := with(t, validMHC, "metadata.name", "defaults")
	g.Expect(k8s.Create(ctx, mhc)).To(Succeed())
	var gotMHC v1alpha1.MachineHealthCheck
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "defaults"}, &gotMHC)).To(Succeed())
	g.Expect(gotMHC.Spec.NodeStartupTimeout).To(Equal(&metav1.Duration{Duration: 10 * time.Minute}))
	g.Expect(gotMHC.Spec.MaxUnhealthy).To(Equal(ptrTo(intstr.FromString("100%"))))
	g.Expect(gotMHC.Spec.RemediationBackoff).To(Equal(defaultBackoff))

	tmpl := with(t, validTemplate, "spec.template.spec", map[string]any{})
	tmpl.SetName("defaults")
	g.Expect(k8s.Create(ctx, tmpl)).To(Succeed())
	var gotTmpl v1alpha1.PowerCycleRemediationTemplate
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "defaults"}, &gotTmpl)).To(Succeed())
	spec := gotTmpl.Spec.Template.Spec
	g.Expect(spec.Strategy).To(Equal(v1alpha1.StrategyReboot))
	g.Expect(spec.DeleteAfterRetries).To(Equal(ptrTo(int32(3))))
	g.Expect(spec.PowerOffTimeoutSeconds).To(Equal(int32(120)))
	g.Expect(spec.PowerOnTimeoutSeconds).To(Equal(int32(600)))
	g.Expect(spec.RetryBackoff).To(Equal(&v1alpha1.RetryBackoff{Initial: metav1.Duration{Duration: 30 * time.Second}, Max: metav1.Duration{Duration: 10 * time.Minute}}))
	g.Expect(spec.OutOfServiceTaint).To(Equal(ptrTo(true)))
	g.Expect(spec.DiagnosticInterrupt).To(BeNil(), "no diagnostic interrupt unless asked for")
	g.Expect(spec.GracefulShutdown).To(BeNil(), "no graceful shutdown unless asked for")

	asked := with(t, validTemplate, "spec.template.spec", map[string]any{"diagnosticInterrupt": map[string]any{}, "gracefulShutdown": map[string]any{}})
	asked.SetName("defaults-asked")
	g.Expect(k8s.Create(ctx, asked)).To(Succeed())
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "defaults-asked"}, &gotTmpl)).To(Succeed())
	g.Expect(gotTmpl.Spec.Template.Spec.DiagnosticInterrupt).To(Equal(&v1alpha1.DiagnosticInterrupt{TimeoutSeconds: 300}))
	g.Expect(gotTmpl.Spec.Template.Spec.GracefulShutdown).To(Equal(&v1alpha1.GracefulShutdown{TimeoutSeconds: 60}))

	bmc := with(t, validBMC, "metadata.name", "defaults")
	g.Expect(k8s.Create(ctx, bmc)).To(Succeed())
	var gotBMC v1alpha1.BMC
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "defaults"}, &gotBMC)).To(Succeed())
	g.Expect(gotBMC.Spec.DisableCertificateVerification).To(BeFalse(), "certificates are verified unless the BMC says otherwise")
	g.Expect(gotBMC.Spec.PowerWatch).To(BeNil(), "the power is not watched unless the BMC asks for it")

	watched := with(t, with(t, validBMC, "metadata.name", "defaults-watched"), "spec.powerWatch", map[string]any{})
	g.Expect(k8s.Create(ctx, watched)).To(Succeed())
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "defaults-watched"}, &gotBMC)).To(Succeed())
	g.Expect(gotBMC.Spec.PowerWatch).To(Equal(&v1alpha1.PowerWatch{EventStream: v1alpha1.PowerWatchEventStreamAuto, PollIntervalSeconds: 30}))
}

func TestValidAddressesAreAccepted(t *testing.T) {
	for i, addr := range []string{
		"redfish://10.0.0.1/redfish/v1/Systems/1",
		"redfish+http://bmc.example.com:8000/redfish/v1/Systems/abc",
		"redfish+https://[fd00::5]:8443/redfish/v1/Systems/1",
		"idrac-redfish://10.0.0.2/redfish/v1/Systems/System.Embedded.1",
		"ilo5-redfish://ilo-7.example.com/redfish/v1/Systems/1",
		"ipmi://10.0.0.3",
		"ipmi://[fe80::1]:6230",
		"10.0.0.4",
		"bmc-9.example.com:623",
		"ironic://ironic.example.com:6385/2b5f1c9e-7b7e-4b5e-9a43-6f1e0d3c1a11",
		"ironic+https://ironic.example.com:6385/2b5f1c9e-7b7e-4b5e-9a43-6f1e0d3c1a11",
		// Absolute names: the final dot changes nothing (every name is looked up absolute).
		"redfish://bmc-7.example.com./redfish/v1/Systems/1",
		"ipmi://bmc-7.example.com.:623",
		"bmc-7.example.com.",
	} {
		t.Run(addr, func(t *testing.T) {
			obj := with(t, validBMC, "spec.address", addr)
			obj.SetName(fmt.Sprintf("addr-%d", i))
			NewWithT(t).Expect(k8s.Create(context.Background(), obj, client.DryRunAll)).To(Succeed())
		})
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestCABundleRefsAreAccepted: the forms an admin writes for a private CA pass admission, including an
// explicit disableCertificateVerification: false beside the reference.
func TestCABundleRefsAreAccepted(t *testing.T) {
	for name, obj := range map[string]*unstructured.Unstructured{
		"configmap, default key": with(t, validBMC, "spec.caBundleRef", map[string]any{"kind": "ConfigMap", "name": "site-ca"}),
		"secret with key":        with(t, validBMC, "spec.caBundleRef", map[string]any{"kind": "Secret", "name": "site-ca", "key": "tls_ca-bundle.pem"}),
		"verification explicitly on": with(t, with(t, validBMC, "spec.disableCertificateVerification", false),
			"spec.caBundleRef", map[string]any{"kind": "ConfigMap", "name": "site-ca"}),
	} {
		t.Run(name, func(t *testing.T) {
			obj.SetName("ca-" + strings.ReplaceAll(strings.ReplaceAll(name, " ", "-"), ",", ""))
			NewWithT(t).Expect(k8s.Create(context.Background(), obj, client.DryRunAll)).To(Succeed())
		})
	}
}

// A negative healthyDelay (a person confirms the Node healthy) is accepted by both kinds, as medik8s'
// NodeHealthCheck accepts it.
func TestNegativeHealthyDelayIsAccepted(t *testing.T) {
	ctx := context.Background()
	g := NewWithT(t)
	nhc := with(t, with(t, validNHC, "metadata.name", "confirm"), "spec.healthyDelay", "-1s")
	g.Expect(k8s.Create(ctx, nhc)).To(Succeed())
	mhc := with(t, with(t, validMHC, "metadata.name", "confirm"), "spec.healthyDelay", "-1m30s")
	g.Expect(k8s.Create(ctx, mhc)).To(Succeed())
	var got v1alpha1.MachineHealthCheck
	g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(mhc), &got)).To(Succeed())
	g.Expect(got.Spec.HealthyDelay.Duration).To(Equal(-90 * time.Second))
}

// A BMC's record of recent remediations is bounded by the API server (10 records), and kubectl get shows
// the last one's time and result.
func TestBMCRecordOfRemediations(t *testing.T) {
	ctx := context.Background()
	g := NewWithT(t)
	b := &v1alpha1.BMC{ObjectMeta: metav1.ObjectMeta{Name: "recorded", Namespace: ns},
		Spec: v1alpha1.BMCSpec{NodeName: "worker-1", Address: "redfish://10.0.0.5/redfish/v1/Systems/1",
			CredentialsSecretRef: v1alpha1.SecretReference{Name: "bmc-credentials"}}}
	g.Expect(k8s.Create(ctx, b)).To(Succeed())
	record := func(i int, result v1alpha1.RemediationResult) v1alpha1.RemediationRecord {
		started := metav1.NewTime(time.Date(2025, 1, 1, 2, i, 0, 0, time.UTC))
		return v1alpha1.RemediationRecord{Kind: "PowerCycleRemediation", Namespace: ns, Name: "worker-1",
			UID: types.UID(fmt.Sprintf("uid-%d", i)), NodeName: "worker-1", Started: started,
			Finished: metav1.NewTime(started.Add(45 * time.Second)), Result: result, Reason: "NodeReady",
			PowerChanges: []v1alpha1.PowerChange{{Target: v1alpha1.PowerOff, Requested: started, Confirmed: &started}}}
	}
	for i := range v1alpha1.MaxRecentRemediations {
		b.Status.RecentRemediations = append(b.Status.RecentRemediations, record(i, v1alpha1.RemediationSucceeded))
	}
	b.Status.RecentRemediations[len(b.Status.RecentRemediations)-1].Result = v1alpha1.RemediationCancelled
	g.Expect(k8s.Status().Update(ctx, b)).To(Succeed(), "10 records")

	tooMany := b.DeepCopy()
	tooMany.Status.RecentRemediations = append(tooMany.Status.RecentRemediations, record(10, v1alpha1.RemediationFailed))
	err := k8s.Status().Update(ctx, tooMany)
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "11 records: %v", err)
	g.Expect(err.Error()).To(ContainSubstring("status.recentRemediations: Too many: 11: must have at most 10 items"))

	// kubectl get bmc: the Last-Remediation (its age) and Result columns are the last record's.
	rc, err := rest.HTTPClientFor(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		strings.TrimSuffix(cfg.Host, "/")+"/apis/remediation.metalheal.io/v1alpha1/namespaces/"+ns+"/bmcs/recorded", nil)
	g.Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := rc.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK), "GET %s", req.URL)
	var table metav1.Table
	g.Expect(json.NewDecoder(resp.Body).Decode(&table)).To(Succeed())
	g.Expect(table.Rows).To(HaveLen(1))
	cells := map[string]any{}
	for i, c := range table.ColumnDefinitions {
		cells[c.Name] = table.Rows[0].Cells[i]
	}
	g.Expect(cells).To(HaveKeyWithValue("Result", "Cancelled"))
	g.Expect(cells).To(HaveKeyWithValue("Last-Remediation", MatchRegexp(`^[0-9]+[dy]`)), "an age of more than a day")
}
