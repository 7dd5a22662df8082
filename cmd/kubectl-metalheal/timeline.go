package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/bmcaccess"
	"github.com/metalheal/metalheal/internal/timeline"
	"github.com/metalheal/metalheal/pkg/leases"
)

// TimelineOutput is what `timeline -o json|yaml` prints.
type TimelineOutput struct {
	Node string `json:"node"`
	// Start is the failure as first recorded (StartedBy: "node NotReady" or "EMR created"); absent when no
	// remediation of the node is on record.
	Start     *time.Time   `json:"start,omitempty"`
	StartedBy string       `json:"startedBy,omitempty"`
	Steps     []StepOutput `json:"steps"`
	// NotOnRecord are the story's steps the cluster keeps no record of (or that have not happened yet).
	NotOnRecord []string `json:"notOnRecord,omitempty"`
	// Unreadable lists the sources the user's credentials may not read.
	Unreadable []string `json:"unreadable,omitempty"`
}

// StepOutput is one line of the timeline.
type StepOutput struct {
	// Since is the time since Start, in seconds.
	Since  float64   `json:"sinceSeconds"`
	Time   time.Time `json:"time"`
	Step   string    `json:"step"`
	Detail string    `json:"detail,omitempty"`
}

func newTimelineCommand(o *options) *cobra.Command {
	var leaseNamespace string
	cmd := &cobra.Command{
		Use:   "timeline NODE",
		Short: "What happened to NODE: its latest remediation step by step, times since the failure",
		Long: `timeline tells the latest remediation of NODE in the words of metalheal's demo: the node going NotReady,
the remediation request, the lease, the power cycle, the node Ready again and the clean-up. It is rebuilt from
what the cluster keeps: the remediation's status while it lives, events (kept an hour by default), the Node's
conditions and taints, the node lease, and the record of the host's last ended remediations that the
remediator keeps on its BMC object (in the manager's namespace: -n, metalheal-system by default), which
outlives the request and its events: yesterday's remediation is told from it. The failure's own moment is not
on record: times count from the first record of it (the node going NotReady, or else the request's creation).
Steps the cluster keeps no record of (a deleted lease, a removed taint, the host's power as only its BMC knew
it) are named at the end. "kubectl metalheal history NODE" lists every remediation the BMC's record keeps.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			ns, err := o.namespace(defaultManagerNamespace)
			if err != nil {
				return err
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			rec, unreadable, err := readRecord(cmd.Context(), c, args[0], leaseNamespace, ns)
			if err != nil {
				return err
			}
			out := timelineOutput(timeline.Build(rec), unreadable)
			return o.print(out, out.table)
		},
	}
	cmd.Flags().StringVar(&leaseNamespace, "lease-namespace", defaultLeaseNamespace, "Namespace of the node leases (the manager's --lease-namespace)")
	return cmd
}

// readRecord reads what the cluster keeps about node, its BMCs in managerNamespace included. What the user
// may not read is named in unreadable.
func readRecord(ctx context.Context, c client.Reader, node, leaseNamespace, managerNamespace string) (timeline.Record, []string, error) {
	rec := timeline.Record{Node: node}
	var unreadable []string
	// tolerate turns a missing object or a refused read into a note; other errors fail.
	tolerate := func(err error, what string) error {
		switch {
		case err == nil, apierrors.IsNotFound(err):
			return nil
		case apierrors.IsForbidden(err):
			unreadable = append(unreadable, fmt.Sprintf("%s: %v", what, err))
			return nil
		}
		return fmt.Errorf("reading %s: %w", what, err)
	}
	n := &corev1.Node{}
	err := c.Get(ctx, client.ObjectKey{Name: node}, n)
	if err == nil {
		rec.NodeObject = n
	} else if err := tolerate(err, "Node "+node); err != nil {
		return rec, nil, err
	}
	var pcrs v1alpha1.PowerCycleRemediationList
	err = c.List(ctx, &pcrs)
	if err == nil {
		for _, p := range pcrs.Items {
			if p.Status.NodeName == node || p.Annotations["remediation.medik8s.io/node-name"] == node || p.Name == node {
				rec.Requests = append(rec.Requests, p)
			}
		}
	} else if err := tolerate(err, "PowerCycleRemediations"); err != nil {
		return rec, nil, err
	}
	l := &coordinationv1.Lease{}
	err = c.Get(ctx, client.ObjectKey{Namespace: leaseNamespace, Name: leases.LeaseName(node)}, l)
	if err == nil {
		rec.Lease = l
	} else if err := tolerate(err, "the node lease"); err != nil {
		return rec, nil, err
	}
	bmcs, err := hostBMCs(ctx, c, managerNamespace, bmcaccess.Host{Node: node})
	if err == nil {
		rec.BMCs = bmcs
	} else if err := tolerate(err, "BMCs in namespace "+managerNamespace); err != nil {
		return rec, nil, err
	}
	// Events of both APIs: events.k8s.io serves core events too (the node lifecycle controller's).
	var evs eventsv1.EventList
	err = c.List(ctx, &evs)
	if err == nil {
		rec.Events = evs.Items
	} else if err := tolerate(err, "events"); err != nil {
		return rec, nil, err
	}
	return rec, unreadable, nil
}

func timelineOutput(tl timeline.Timeline, unreadable []string) TimelineOutput {
	out := TimelineOutput{Node: tl.Node, Steps: []StepOutput{}, Unreadable: unreadable}
	if !tl.Start.IsZero() {
		out.Start = &tl.Start
		out.StartedBy = tl.StartStep.String()
	}
	for _, e := range tl.Entries {
		out.Steps = append(out.Steps, StepOutput{Since: e.At.Seconds(), Time: e.Time, Step: e.Label, Detail: e.Detail})
	}
	for _, s := range tl.NotOnRecord {
		out.NotOnRecord = append(out.NotOnRecord, s.String())
	}
	return out
}

func (t TimelineOutput) table(w io.Writer) error {
	if t.Start == nil {
		fmt.Fprintf(w, "No remediation of node %s is on record (events are kept an hour by default).\n", t.Node)
	} else {
		fmt.Fprintf(w, "Timeline of node %s (times since the failure was first recorded: %s at %s)\n", t.Node, t.StartedBy,
			t.Start.UTC().Format(time.RFC3339))
		for _, s := range t.Steps {
			fmt.Fprintln(w, timeline.FormatEntry(timeline.Entry{At: time.Duration(s.Since * float64(time.Second)), Label: s.Step, Detail: s.Detail}))
		}
		if len(t.NotOnRecord) > 0 {
			fmt.Fprintf(w, "Not on record: %s\n", strings.Join(t.NotOnRecord, ", "))
		}
	}
	for _, u := range t.Unreadable {
		fmt.Fprintf(w, "Not readable with these credentials: %s\n", u)
	}
	return nil
}
