package mhc

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	v1alpha1 "github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/testenv"
)

// A MachineHealthCheck whose template makes PowerCycleRemediations reads them as a NodeHealthCheck does.
// They come from the typed informer the remediator keeps in the same manager, not from a second,
// unstructured one (each watch event decoded twice, each request held twice). And the check hears only of
// the changes it acts on: the dozen progress reports a power cycle writes cost no reconcile of the check
// over all its Machines.
var _ = Describe("A check whose template makes PowerCycleRemediations", func() {
	It("reads them from the remediator's informer and is not reconciled for their progress reports", func(ctx SpecContext) {
		w := newWorld(ctx)
		log := &testenv.RequestLog{}
		mgr := w.runManager(ctx, testenv.ManagerOptions{WrapTransport: log.Wrap}, Options{ResyncPeriod: worldResync})

		By("the remediator's typed informer of PowerCycleRemediations runs in the manager, as in main")
		_, err := mgr.GetCache().GetInformer(ctx, &v1alpha1.PowerCycleRemediation{})
		Expect(err).NotTo(HaveOccurred())
		requestsPath := "/apis/remediation.metalheal.io/v1alpha1/namespaces/" + w.ns + "/powercycleremediations"
		gets := func() int { return log.GetsTo(requestsPath) }
		Eventually(steady(gets)).WithPolling(time.Second).WithTimeout(eventuallyTimeout).Should(BeTrue(),
			"the remediator's informer lists and watches the kind")
		reads := gets()

		By("a check makes a request for an unhealthy Machine")
		w.createTemplate(ctx, "reboot", "reboot")
		sick := w.createNode(ctx, k8s, w.nodeName("m"), corev1.ConditionUnknown, time.Hour)
		w.createMachine(ctx, "m", withNodeRef(sick.Name))
		w.createCheck(ctx, "check", func(mhc *v1alpha1.MachineHealthCheck) {
			mhc.Spec.RemediationTemplate = ptr.To(templateRef("reboot"))
		})
		Eventually(func() int { return len(w.powerCycleRemediations(ctx)) }).WithTimeout(eventuallyTimeout).Should(Equal(1))
		Expect(log.GetsTo(requestsPath)).To(Equal(reads), "no second informer lists or watches the check's requests")

		By("the remediator takes the request up: Processing=True, Succeeded=Unknown")
		key := types.NamespacedName{Namespace: w.ns, Name: w.powerCycleRemediations(ctx)[0].GetName()}
		report := func(phase v1alpha1.PowerCyclePhase, power v1alpha1.PowerState, retries int32) {
			GinkgoHelper()
			req := &v1alpha1.PowerCycleRemediation{}
			Expect(k8s.Get(ctx, key, req)).To(Succeed())
			req.Status.Phase, req.Status.PowerState, req.Status.RetryCount = phase, power, retries
			req.Status.LastTransitionTime = &metav1.Time{Time: w.clock.Now().Add(time.Duration(retries) * time.Second)}
			for _, t := range []string{v1alpha1.ConditionProcessing, v1alpha1.ConditionSucceeded} {
				status := metav1.ConditionUnknown
				if t == v1alpha1.ConditionProcessing {
					status = metav1.ConditionTrue
				}
				// The reasons follow the phase; the statuses the check reads stay as they are.
				meta.SetStatusCondition(&req.Status.Conditions, metav1.Condition{Type: t, Status: status, Reason: string(phase),
					Message: fmt.Sprintf("%s (attempt %d)", phase, retries+1)})
			}
			Expect(k8s.Status().Update(ctx, req)).To(Succeed())
		}
		before := reconciles()
		report(v1alpha1.PhasePending, "", 0)
		Eventually(reconciles).WithTimeout(eventuallyTimeout).Should(BeNumerically(">", before), "the check hears that its remediator took the request up")
		Eventually(steady(reconciles)).WithPolling(time.Second).WithTimeout(eventuallyTimeout).Should(BeTrue(), "then nothing changes any more")

		By("the remediator reports its progress a dozen times")
		base := reconciles()
		phases := []v1alpha1.PowerCyclePhase{v1alpha1.PhaseDiagnosing, v1alpha1.PhaseShuttingDown, v1alpha1.PhasePoweringOff,
			v1alpha1.PhasePoweredOff, v1alpha1.PhasePoweringOn, v1alpha1.PhaseWaitingForNode}
		for attempt := range int32(2) {
			for _, phase := range phases {
				power := v1alpha1.PowerOn
				if phase == v1alpha1.PhasePoweredOff || phase == v1alpha1.PhasePoweringOn {
					power = v1alpha1.PowerOff
				}
				report(phase, power, attempt)
			}
		}

		By("then a change the check acts on: every earlier event of the request has been delivered before it")
		req := &v1alpha1.PowerCycleRemediation{}
		Expect(k8s.Get(ctx, key, req)).To(Succeed())
		metav1.SetMetaDataAnnotation(&req.ObjectMeta, "example.com/seen", "yes")
		Expect(k8s.Update(ctx, req)).To(Succeed())
		Eventually(reconciles).WithTimeout(eventuallyTimeout).Should(BeNumerically(">", base), "the annotation reaches the check")
		Consistently(reconciles).WithTimeout(2*time.Second).Should(Equal(base+1),
			"one reconcile for the annotation, none for the twelve progress reports")
	})
})

// reconciles is how many reconciles the manager's MachineHealthCheck controller has finished, all results.
func reconciles() float64 {
	GinkgoHelper()
	families, err := ctrlmetrics.Registry.Gather()
	Expect(err).NotTo(HaveOccurred())
	var n float64
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == "machinehealthcheck" {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// steady succeeds, polled a second apart, once read returns the same value, not zero, twice in a row: the
// activity it counts has stopped.
func steady[T int | float64](read func() T) func() bool {
	var last T
	return func() bool {
		n := read()
		settled := n != 0 && n == last
		last = n
		return settled
	}
}
