package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/template"
	"github.com/metalheal/metalheal/test/harness"
)

// Floor is what the API server alone takes to store a burst: the bench sends as many creates as a burst
// fails nodes, all at once, with nothing between them and the API server. A burst's detection delay can be
// no shorter than the time the API server takes to store them all, however quickly a controller sends
// its creates; the floor tells that part from the controller's in the same world and hour.
//
// The objects are PowerCycleRemediationTemplates shaped like the check's requests (the same spec, the
// request's annotations and two owner references, a Node and the check): a custom resource of the same
// size, which no controller acts on.
type Floor struct {
	Kind    string `json:"kind"`
	Objects int    `json:"objects"`
	Rounds  int    `json:"rounds"`
	// StoredMs is, for each object of every round, from the round's start (every create sent at once) to
	// the API server's answer as the bench received it (an upper bound of when it was stored); LastMs the
	// last answer of each round.
	StoredMs *Stats    `json:"storedMs,omitempty"`
	LastMs   []float64 `json:"lastMs"`
	Error    string    `json:"error,omitempty"`
}

// floorGap separates the floor's rounds, and the last round from the burst, so that the watch events of
// one round's deletes are not delivered among the next round's creates.
const floorGap = 3 * time.Second

// measureFloor runs the floor's rounds, each creating one object per node of nodes at once and then
// deleting them; a round in which the API server refused a create or a delete ends them and counts for
// nothing. It measures on the bench's own client (the admin's, exempt from the API server's fairness
// queues), so the floor is what storing costs, not a queue.
func (b *bench) measureFloor(ctx context.Context, nodes []string, rounds int) *Floor {
	f := &Floor{Kind: "PowerCycleRemediationTemplate", Objects: len(nodes), Rounds: rounds}
	p := b.track.begin("floor")
	p.Notes = append(p.Notes, "the API server's floor: the bench's own creates, no failure")
	objs, err := b.floorObjects(ctx, nodes)
	if err != nil {
		f.Error = err.Error()
		return f
	}
	var stored []float64
	for r := 0; r < rounds && f.Error == ""; r++ {
		took, err := createAtOnce(ctx, b.h.Client, objs)
		if derr := deleteAll(ctx, b.h.Client, objs); err != nil || derr != nil {
			f.Error = fmt.Sprintf("round %d: %v", r+1, firstErr(err, derr))
			break
		}
		stored = append(stored, took...)
		f.LastMs = append(f.LastMs, slices.Max(took)) // took has an entry per object, and a burst has nodes
		select {
		case <-ctx.Done():
			f.Error = ctx.Err().Error()
		case <-time.After(floorGap):
		}
	}
	f.StoredMs = stats(stored)
	logf("floor: the API server answered %d creates sent at once by the bench within %s ms (the last of each round)", len(objs), joinMs(f.LastMs))
	return f
}

// floorObjects builds the floor's objects, one per node, named after it.
func (b *bench) floorObjects(ctx context.Context, nodes []string) ([]client.Object, error) {
	var check v1alpha1.NodeHealthCheck
	owners := []metav1.OwnerReference{}
	switch err := b.h.Client.Get(ctx, client.ObjectKey{Name: checkName}, &check); {
	case err == nil:
		owners = append(owners, metav1.OwnerReference{APIVersion: v1alpha1.GroupVersion.String(), Kind: "NodeHealthCheck", Name: check.Name, UID: check.UID})
	case !apierrors.IsNotFound(err): // a peer has no check of ours: its objects have the Node's reference alone
		return nil, fmt.Errorf("reading NodeHealthCheck %s: %w", checkName, err)
	}
	objs := make([]client.Object, 0, len(nodes))
	for _, name := range nodes {
		node, err := b.kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("reading node %s: %w", name, err)
		}
		objs = append(objs, &v1alpha1.PowerCycleRemediationTemplate{
			ObjectMeta: metav1.ObjectMeta{
				Name: "floor-" + name, Namespace: harness.Namespace,
				Annotations: map[string]string{
					template.AnnotationNodeName:            name,
					template.AnnotationTemplateName:        checkName,
					template.AnnotationClonedFromName:      checkName,
					template.AnnotationClonedFromGroupKind: "PowerCycleRemediationTemplate." + v1alpha1.GroupVersion.Group,
				},
				OwnerReferences: append([]metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: name, UID: node.UID}}, owners...),
			},
			Spec: v1alpha1.PowerCycleRemediationTemplateSpec{Template: v1alpha1.PowerCycleRemediationTemplateResource{Spec: pcrSpec()}},
		})
	}
	return objs, nil
}

// createAtOnce creates every object, all at once, and returns each one's time to the API server's answer
// in milliseconds. The objects are copies: the caller's stay unset by the server.
func createAtOnce(ctx context.Context, c client.Client, objs []client.Object) ([]float64, error) {
	took := make([]float64, len(objs))
	errs := make([]error, len(objs))
	copies := make([]client.Object, len(objs))
	for i, o := range objs {
		copies[i] = o.DeepCopyObject().(client.Object)
	}
	var wg sync.WaitGroup
	start := time.Now()
	for i := range copies {
		wg.Go(func() {
			errs[i] = c.Create(ctx, copies[i])
			took[i] = float64(time.Since(start).Microseconds()) / 1000
		})
	}
	wg.Wait()
	return took, firstErr(errs...)
}

// deleteAll deletes the objects, all at once, and waits for the answers.
func deleteAll(ctx context.Context, c client.Client, objs []client.Object) error {
	errs := make([]error, len(objs))
	var wg sync.WaitGroup
	for i := range objs {
		wg.Go(func() { errs[i] = client.IgnoreNotFound(c.Delete(ctx, objs[i])) })
	}
	wg.Wait()
	return firstErr(errs...)
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
