package engine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/template"
	"github.com/metalheal/metalheal/pkg/leases"
)

// TestDelete: a request is deleted, with or without the UID the check read; one gone already is nothing
// to do. (The fake client ignores the UID precondition: the MachineHealthCheck's envtests cover it.)
func TestDelete(t *testing.T) {
	ref := Ref{APIVersion: "fence.example.com/v1", Kind: "FenceRemediation", Namespace: "ns", Name: "w-0"}
	for name, tc := range map[string]struct {
		exists      bool
		uid         types.UID
		wantErr     bool
		wantDeleted bool
	}{
		"exists: deleted":                    {exists: true, wantDeleted: true},
		"exists, the UID read: deleted":      {exists: true, uid: "read", wantDeleted: true},
		"gone already: nothing to do":        {wantDeleted: true},
		"gone already, with a UID: no error": {uid: "read", wantDeleted: true},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			b := fake.NewClientBuilder()
			if tc.exists {
				obj := ref.Object()
				obj.SetUID("read")
				b = b.WithObjects(obj)
			}
			c := b.Build()
			err := Delete(t.Context(), c, ref, tc.uid)
			g.Expect(err != nil).To(Equal(tc.wantErr), "%v", err)
			got := &unstructured.Unstructured{}
			got.SetGroupVersionKind(ref.Object().GroupVersionKind())
			g.Expect(client.IgnoreNotFound(c.Get(t.Context(), client.ObjectKeyFromObject(ref.Object()), got))).To(Succeed())
			g.Expect(got.GetName() == "").To(Equal(tc.wantDeleted))
		})
	}
}

// TestStarterRelease: the check's lease on a Node is let go; a Node without one is nothing to do.
func TestStarterRelease(t *testing.T) {
	g := NewWithT(t)
	c := fake.NewClientBuilder().Build()
	s := starter(t, c)
	g.Expect(s.TakeLease(t.Context(), node("w-0"), false)).To(BeNil())
	g.Expect(s.Release(t.Context(), "w-0")).To(Succeed())
	g.Expect(s.Release(t.Context(), "w-1")).To(Succeed())
	other, err := leases.NewManager(c, "node-maintenance", clocktesting.NewFakeClock(startT0), leases.WithNamespace(leases.DefaultNamespace))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(other.RequestLease(t.Context(), node("w-0"), time.Hour)).To(Succeed(), "the lease is free again")
}

// TestExecutorOrder: both kinds' writes go out in the executor's order, whatever runs in parallel. A
// control-plane start follows the release of the leases the check no longer needs (the claim would refuse
// it otherwise); a person's confirmation goes only once the requests it confirmed are deleted; a target's
// new request follows its own time-outs and deletions, and its kind's own write follows the request; a
// request that is its target's first write goes before the other targets' writes; the leases that follow
// their requests, and the kind's own writes of targets whose request went first, wait for every request. Each write is named "verb Kind/name", each hook call "after
// target", and the reports are in the order of the jobs.
func TestExecutorOrder(t *testing.T) {
	pcRef := func(name string) Ref {
		return Ref{APIVersion: "remediation.metalheal.io/v1alpha1", Kind: "PowerCycleRemediation", Namespace: "ns", Name: name}
	}
	target := func(name string, requests ...string) Target {
		tg := Target{Name: name, NodeName: name, Node: node(name)}
		if strings.HasPrefix(name, "cp-") {
			tg.CPKey = name
		}
		for _, r := range requests {
			tg.Requests = append(tg.Requests, Request{Ref: pcRef(r)})
		}
		return tg
	}
	// create sends a new request for name: step 0 a PowerCycleRemediation (its lease after it), step 1 a
	// FenceRemediation (its lease first).
	create := func(name string, step int) Job {
		return JobOf(&Outcome{Target: target(name), Create: &Create{Step: step}})
	}
	for name, tc := range map[string]struct {
		limit int
		// held: the check holds these Nodes' leases, someone else those of heldByOther; confirmed: a person
		// confirmed these Nodes healthy; existing: these PowerCycleRemediations exist; fail: this write fails.
		held, heldByOther, confirmed, existing []string
		fail                                   string
		release                                []string
		jobs                                   []Job
		// before: each write or hook call happens, before the next one in its list; absent: never happen.
		before  [][]string
		absent  []string
		reports []string
		wantErr bool
	}{
		"a control-plane start follows the release of a lease the check no longer needs": {
			held: []string{"cp-1"}, release: []string{"cp-1"}, jobs: []Job{create("cp-0", 1)},
			before:  [][]string{{"delete Lease/node-cp-1", "create Lease/node-cp-0", "create FenceRemediation/cp-0"}},
			reports: []string{"cp-0 created"},
		},
		"a person's confirmation goes once the requests it confirmed are deleted": {
			confirmed: []string{"w-0"}, existing: []string{"w-0"},
			jobs:   []Job{JobOf(&Outcome{Target: target("w-0", "w-0"), Delete: []Ref{pcRef("w-0")}, Unconfirm: true})},
			before: [][]string{{"delete PowerCycleRemediation/w-0", "update Node/w-0"}},
		},
		"a confirmation stays while a request it confirmed could not be deleted": {
			confirmed: []string{"w-0"}, existing: []string{"w-0"}, fail: "delete PowerCycleRemediation/w-0",
			jobs:    []Job{JobOf(&Outcome{Target: target("w-0", "w-0"), Delete: []Ref{pcRef("w-0")}, Unconfirm: true})},
			absent:  []string{"update Node/w-0"},
			wantErr: true,
		},
		"a new request follows its target's time-outs and deletions, and the kind's own write follows it": {
			existing: []string{"w-0", "w-0-old"},
			jobs: []Job{JobOf(&Outcome{Target: target("w-0", "w-0", "w-0-old"), Create: &Create{Step: 1, Name: "w-0-next"},
				Walk: Walk{TimeOut: []Ref{pcRef("w-0")}, Delete: []Ref{pcRef("w-0-old")}}})},
			before: [][]string{{"patch PowerCycleRemediation/w-0", "delete PowerCycleRemediation/w-0-old", "create Lease/node-w-0",
				"create FenceRemediation/w-0-next", "after w-0"}},
			reports: []string{"w-0 created"},
		},
		"a request that is its target's first write goes before the other targets' writes": {
			limit: 1, existing: []string{"w-1"}, held: []string{"w-2"},
			jobs: []Job{JobOf(&Outcome{Target: target("w-1", "w-1"), Delete: []Ref{pcRef("w-1")}}),
				JobOf(&Outcome{Target: target("w-2", "w-2"), Lease: true}), create("w-0", 0)},
			before: [][]string{{"create PowerCycleRemediation/w-0", "delete PowerCycleRemediation/w-1", "create Lease/node-w-0"},
				{"create PowerCycleRemediation/w-0", "update Lease/node-w-2"}},
			reports: []string{"w-0 created"},
		},
		"a request that is its target's first write goes before the other targets' writes, however many go at once": {
			limit: 4, existing: []string{"w-1"}, held: []string{"w-2"},
			jobs: []Job{JobOf(&Outcome{Target: target("w-1", "w-1"), Delete: []Ref{pcRef("w-1")}}),
				JobOf(&Outcome{Target: target("w-2", "w-2"), Lease: true}), create("w-0", 0)},
			before: [][]string{{"create PowerCycleRemediation/w-0", "delete PowerCycleRemediation/w-1", "create Lease/node-w-0"},
				{"create PowerCycleRemediation/w-0", "update Lease/node-w-2"}},
			reports: []string{"w-0 created"},
		},
		"every request of the pass goes out before the leases that follow them, reported in the jobs' order": {
			limit: 4, jobs: []Job{create("w-1", 0), create("w-0", 0), create("cp-0", 0)},
			before: [][]string{{"create PowerCycleRemediation/w-0", "create Lease/node-w-1"}, {"create PowerCycleRemediation/w-1", "create Lease/node-w-0"},
				{"create Lease/node-cp-0", "create PowerCycleRemediation/cp-0"}},
			reports: []string{"w-1 created", "w-0 created", "cp-0 created"},
		},
		"the kind's own write of a target whose request went first waits for every request of the pass and its lease": {
			limit: 4, jobs: []Job{create("w-0", 0), create("w-1", 0)},
			before: [][]string{{"create PowerCycleRemediation/w-1", "after w-0"}, {"create PowerCycleRemediation/w-0", "after w-1"},
				{"create Lease/node-w-0", "after w-0"}},
			reports: []string{"w-0 created", "w-1 created"},
		},
		"a control-plane Machine without a Node handed to its owner goes through the claim: another control-plane lease refuses it": {
			heldByOther: []string{"cp-1"},
			jobs:        []Job{{Outcome: &Outcome{Target: Target{Name: "cp-0", CPKey: "Machine ns/cp-0"}}, Starts: true, ControlPlane: true}},
			before:      [][]string{{"leased cp-0 ControlPlaneBusy", "after cp-0"}},
		},
		"a request for a control-plane target without a Node goes through the claim: another control-plane lease refuses it": {
			heldByOther: []string{"cp-1"},
			jobs:        []Job{JobOf(&Outcome{Target: Target{Name: "cp-0", CPKey: "Machine ns/cp-0"}, Create: &Create{Step: 1}})},
			absent:      []string{"create FenceRemediation/cp-0"},
			reports:     []string{"cp-0 skip ControlPlaneBusy"},
		},
		"a lease someone else took meanwhile is the kind's to report; its request is deleted again": {
			heldByOther: []string{"w-0", "w-1"},
			jobs:        []Job{JobOf(&Outcome{Target: target("w-0", "w-0"), Lease: true}), create("w-1", 0)},
			before:      [][]string{{"leased w-0 LeaseHeldByOther"}, {"create PowerCycleRemediation/w-1", "delete PowerCycleRemediation/w-1"}},
			absent:      []string{"create Lease/node-w-1"},
			reports:     []string{"w-1 skip LeaseHeldByOther"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			base := fake.NewClientBuilder().Build()
			ctx := t.Context()
			for _, n := range tc.held {
				g.Expect(starter(t, base).TakeLease(ctx, node(n), false)).To(BeNil())
			}
			maintenance, err := leases.NewManager(base, "node-maintenance", clocktesting.NewFakeClock(startT0), leases.WithNamespace(leases.DefaultNamespace))
			g.Expect(err).NotTo(HaveOccurred())
			for _, n := range tc.heldByOther {
				g.Expect(maintenance.RequestLease(ctx, node(n), time.Hour)).To(Succeed())
			}
			for _, n := range tc.confirmed {
				g.Expect(base.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n,
					Annotations: map[string]string{v1alpha1.AnnotationConfirmedHealthy: ""}}})).To(Succeed())
			}
			for _, r := range tc.existing {
				g.Expect(base.Create(ctx, pcRef(r).Object())).To(Succeed())
			}

			var mu sync.Mutex
			var log, reports []string
			note := func(s string) {
				mu.Lock()
				defer mu.Unlock()
				log = append(log, s)
			}
			write := func(c client.WithWatch, verb string, obj client.Object, do func() error) error {
				gvk, err := apiutil.GVKForObject(obj, c.Scheme())
				if err != nil {
					return err
				}
				w := verb + " " + gvk.Kind + "/" + obj.GetName()
				if w == tc.fail {
					return errors.New("injected failure")
				}
				if err := do(); err != nil {
					return err
				}
				note(w)
				return nil
			}
			c := interceptor.NewClient(base.(client.WithWatch), interceptor.Funcs{
				Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
					return write(c, "create", obj, func() error { return c.Create(ctx, obj, opts...) })
				},
				Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
					return write(c, "update", obj, func() error { return c.Update(ctx, obj, opts...) })
				},
				Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
					return write(c, "patch", obj, func() error { return c.Patch(ctx, obj, p, opts...) })
				},
				Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
					return write(c, "delete", obj, func() error { return c.Delete(ctx, obj, opts...) })
				},
			})
			templates := []*unstructured.Unstructured{
				{Object: map[string]any{"apiVersion": "remediation.metalheal.io/v1alpha1", "kind": "PowerCycleRemediationTemplate",
					"metadata": map[string]any{"name": "pc", "namespace": "ns"}, "spec": map[string]any{"template": map[string]any{}}}},
				{Object: map[string]any{"apiVersion": "fence.example.com/v1", "kind": "FenceRemediationTemplate",
					"metadata": map[string]any{"name": "fence", "namespace": "ns"}, "spec": map[string]any{"template": map[string]any{}}}},
			}
			x := &Executor{Starter: starter(t, c), Nodes: c, Clock: clocktesting.NewFakeClock(startT0), Limit: tc.limit,
				Check: metav1.OwnerReference{APIVersion: "remediation.metalheal.io/v1alpha1", Kind: "NodeHealthCheck", Name: "self", UID: "self"},
				Template: func(_ context.Context, i int) (template.Request, error) {
					o := tc.jobs[i].Outcome
					return template.Request{Template: templates[o.Create.Step],
						Target: metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: o.Target.Name, UID: types.UID("uid-" + o.Target.Name)}}, nil
				},
				After:  func(_ context.Context, i int) error { note("after " + tc.jobs[i].Outcome.Target.Name); return nil },
				Leased: func(i int, skip *Skip, _ error) { note("leased " + tc.jobs[i].Outcome.Target.Name + " " + skip.Reason) },
				Report: func(i int, res Sent) {
					r := tc.jobs[i].Outcome.Target.Name + " created"
					if res.Skip != nil {
						r = tc.jobs[i].Outcome.Target.Name + " skip " + res.Skip.Reason
					}
					reports = append(reports, r)
				},
			}
			err = x.Run(ctx, tc.release, tc.jobs)
			g.Expect(err != nil).To(Equal(tc.wantErr), "%v", err)
			for _, seq := range tc.before {
				at := -1
				for _, w := range seq {
					next := slices.Index(log, w)
					g.Expect(next).To(BeNumerically(">", at), "%q, after %v: %v", w, seq, log)
					at = next
				}
			}
			for _, w := range tc.absent {
				g.Expect(log).NotTo(ContainElement(w))
			}
			g.Expect(reports).To(Equal(tc.reports))
		})
	}
}
