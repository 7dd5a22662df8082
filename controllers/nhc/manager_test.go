package nhc

import (
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/template"
	"github.com/metalheal/metalheal/internal/testenv"
)

// requestLog counts the manager's API requests that are not watches, by method and path.
type requestLog struct {
	mu    sync.Mutex
	reads map[string]int // "GET /apis/.../powercycleremediations"
}

func (l *requestLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		if req.URL.Query().Get("watch") != "true" {
			l.mu.Lock()
			l.reads[req.Method+" "+req.URL.Path]++
			l.mu.Unlock()
		}
		return rt.RoundTrip(req)
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// With a real manager: the watches on Nodes, leases, templates and remediation requests (of kinds only
// named at run time) drive the reconciles, and the remediation kinds are read from the informer cache,
// not listed from the API server per reconcile.
var _ = Describe("Running in a manager", func() {
	It("reconciles on Node, lease, template and remediation request events, and reads every kind from the informers", func(ctx SpecContext) {
		w := newWorld(ctx)
		w.clk.SetTime(t0.Add(time.Hour)) // every condition set at t0 has expired

		log := &requestLog{reads: map[string]int{}}
		w.startManager(ctx, testenv.ManagerOptions{WrapTransport: log.wrap}, Options{})

		pc := w.pcTemplate(ctx, "pc")
		fence := w.fenceTemplate(ctx, "fence", map[string]any{"template": map[string]any{"spec": map[string]any{"mode": "hard"}}})
		check := w.check(ctx, "nhc", nil, escalating(
			v1alpha1.EscalatingRemediation{RemediationTemplate: pc, Order: 1, Timeout: metav1.Duration{Duration: 30 * time.Minute}},
			v1alpha1.EscalatingRemediation{RemediationTemplate: fence, Order: 2, Timeout: metav1.Duration{Duration: 30 * time.Minute}},
		))
		sick := w.node(ctx, "w1", corev1.ConditionUnknown, t0)
		later := w.node(ctx, "w2", corev1.ConditionTrue, t0)

		// A check and an unhealthy node: the request appears.
		eventually(func() []string { return names(w.remediations(ctx, pcRemediation, check)) }).Should(Equal([]string{sick.Name}))

		// A node's condition changes: the node watch reconciles the check.
		w.setReady(ctx, later, corev1.ConditionUnknown, t0)
		eventually(func() []string { return names(w.remediations(ctx, pcRemediation, check)) }).Should(Equal([]string{sick.Name, later.Name}))

		// The remediator gives up: the watch on the (run-time) remediation kind escalates at once.
		first := w.remediations(ctx, pcRemediation, check)[0]
		w.setSucceeded(ctx, &first, metav1.ConditionFalse)
		eventually(func() []string { return names(w.remediations(ctx, fenceRemediation, check)) }).Should(Equal([]string{sick.Name}))
		Expect(w.remediations(ctx, pcRemediation, check)[0].GetAnnotations()).To(HaveKey(template.AnnotationTimedOut))

		// The nodes recover: requests deleted, then (request deletions watched) leases released.
		w.setReady(ctx, sick, corev1.ConditionTrue, t0.Add(time.Hour))
		w.setReady(ctx, later, corev1.ConditionTrue, t0.Add(time.Hour))
		eventually(func() int {
			return len(w.remediations(ctx, pcRemediation, check)) + len(w.remediations(ctx, fenceRemediation, check))
		}).Should(BeZero())
		eventually(func() string { return w.leaseHolder(ctx, sick) + w.leaseHolder(ctx, later) }).Should(BeEmpty())
		eventually(func() v1alpha1.NodeHealthCheckPhase {
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(check), check)).To(Succeed())
			return check.Status.Phase
		}).Should(Equal(v1alpha1.PhaseEnabled))

		// A lease held by node maintenance; its release is watched and the check proceeds.
		maintenance := w.maintenance()
		Expect(maintenance.RequestLease(ctx, sick, time.Hour)).To(Succeed())
		w.setReady(ctx, sick, corev1.ConditionFalse, t0)
		eventually(func() []testenv.Event { return w.rec.With(EventSkippedLeaseHeld) }).Should(HaveLen(1))
		Expect(maintenance.InvalidateLease(ctx, sick.Name)).To(Succeed())
		eventually(func() []string { return names(w.remediations(ctx, pcRemediation, check)) }).Should(Equal([]string{sick.Name}))

		// A check whose template is missing is disabled; the template watch enables it when it appears.
		ref := v1alpha1.TemplateReference{APIVersion: pc.APIVersion, Kind: pc.Kind, Name: w.pool + "-pc2", Namespace: pcNS}
		other := w.check(ctx, "other", &ref, func(c *v1alpha1.NodeHealthCheck) {
			c.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": w.pool + "-none"}}
		})
		disabled := func() bool {
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(other), other)).To(Succeed())
			return meta.IsStatusConditionTrue(other.Status.Conditions, v1alpha1.ConditionDisabled)
		}
		eventually(disabled).Should(BeTrue())
		w.pcTemplate(ctx, "pc2")
		eventually(disabled).Should(BeFalse())

		// Everything above came from the informers: no kind was ever listed (client-go's informers start with
		// a streaming watch) and no object was read one by one; the only reads are API discovery.
		Expect(log.readsBeyondDiscovery()).To(BeEmpty())
	})
})

var discovery = regexp.MustCompile(`^(/api(/v1)?|/apis(/[^/]+(/[^/]+)?)?)$`)

// readsBeyondDiscovery lists the GET requests that are not API discovery.
func (l *requestLog) readsBeyondDiscovery() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for k := range l.reads {
		m, path, _ := strings.Cut(k, " ")
		if m == http.MethodGet && !discovery.MatchString(path) {
			out = append(out, k)
		}
	}
	return out
}
