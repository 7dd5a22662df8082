package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/metalheal/metalheal/api/v1alpha1"
)

// HistoryOutput is what `history -o json|yaml` prints.
type HistoryOutput struct {
	// Node is the host, as "node" for a Node of the manager's cluster or "namespace/cluster/node".
	Node string `json:"node"`
	// BMCs are the namespace/name of the host's BMC objects, whose status keeps the record (one, unless
	// misconfigured).
	BMCs []string `json:"bmcs"`
	// Remediations are the host's last ended remediations, oldest first, as its BMC recorded them.
	Remediations []v1alpha1.RemediationRecord `json:"remediations"`
	// Unreadable names what the user's credentials may not read.
	Unreadable []string `json:"unreadable,omitempty"`
}

func newHistoryCommand(o *options) *cobra.Command {
	var cluster string
	cmd := &cobra.Command{
		Use:   "history NODE",
		Short: fmt.Sprintf("NODE's last %d ended remediations, as its BMC records them: when, what, how they ended", v1alpha1.MaxRecentRemediations),
		Long: fmt.Sprintf(`history lists the remediations of NODE's host that ended, oldest first, from the record the remediator keeps
on the host's BMC object (status.recentRemediations, in the manager's namespace: -n, metalheal-system by
default; with --cluster, the BMC of that Cluster API workload cluster's NODE). The BMC keeps the last %d: each
request of the host is recorded once, when it lets go of the host, with who asked for it, when it started and
ended, the power changes made and how it ended (Succeeded, Failed, Cancelled, HandedOver). The record outlives
the requests and their events; "kubectl metalheal timeline NODE" tells the last one step by step.`, v1alpha1.MaxRecentRemediations),
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			host, err := parseHost(args[0], cluster)
			if err != nil {
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
			out := HistoryOutput{Node: host.String(), BMCs: []string{}, Remediations: []v1alpha1.RemediationRecord{}}
			bmcs, err := hostBMCs(cmd.Context(), c, ns, host)
			switch {
			case apierrors.IsForbidden(err):
				out.Unreadable = append(out.Unreadable, fmt.Sprintf("BMCs in namespace %s: %v", ns, err))
			case err != nil:
				return fmt.Errorf("listing BMCs in namespace %q: %w", ns, err)
			}
			for _, b := range bmcs {
				out.BMCs = append(out.BMCs, b.Namespace+"/"+b.Name)
				out.Remediations = append(out.Remediations, b.Status.RecentRemediations...)
			}
			return o.print(out, func(w io.Writer) error { return out.table(w, ns) })
		},
	}
	cmd.Flags().StringVar(&cluster, "cluster", "", "NAMESPACE/NAME of the Cluster API Cluster whose workload cluster holds NODE (the BMC's spec.cluster); empty: a Node of the manager's cluster")
	return cmd
}

func (h HistoryOutput) table(w io.Writer, ns string) error {
	switch {
	case len(h.Unreadable) > 0:
	case len(h.BMCs) == 0:
		fmt.Fprintf(w, "No BMC in namespace %s powers node %s: there is no record of its remediations.\n", ns, h.Node)
	case len(h.Remediations) == 0:
		fmt.Fprintf(w, "No remediation of node %s has ended since BMC %s has kept a record.\n", h.Node, strings.Join(h.BMCs, ", "))
	default:
		fmt.Fprintf(w, "Remediations of node %s, oldest first, as BMC %s records them (the last %d are kept):\n",
			h.Node, strings.Join(h.BMCs, ", "), v1alpha1.MaxRecentRemediations)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "STARTED\tTOOK\tRESULT\tREASON\tATTEMPTS\tREQUEST\tBY\tPOWER\tMESSAGE")
		for _, r := range h.Remediations {
			by := "-"
			if r.HealthCheck != nil {
				by = r.HealthCheck.Kind + "/" + r.HealthCheck.Name
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s/%s\t%s\t%s\t%s\n", r.Started.UTC().Format(time.RFC3339),
				r.Finished.Sub(r.Started.Time).Round(time.Second), r.Result, orDash(r.Reason), r.Attempts, r.Namespace, r.Name, by,
				orDash(powerSummary(r.PowerChanges)), orDash(r.Message))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	for _, u := range h.Unreadable {
		fmt.Fprintf(w, "Not readable with these credentials: %s\n", u)
	}
	return nil
}

// powerSummary tells power changes in a table cell: "off 02:13:06, on 02:13:09", each at the BMC's
// confirmation, or "(not confirmed)" after the time it was asked for.
func powerSummary(changes []v1alpha1.PowerChange) string {
	parts := make([]string, 0, len(changes))
	for _, c := range changes {
		word := strings.ToLower(string(c.Target))
		if c.Confirmed != nil {
			parts = append(parts, word+" "+c.Confirmed.UTC().Format(time.TimeOnly))
		} else {
			parts = append(parts, word+" "+c.Requested.UTC().Format(time.TimeOnly)+" (not confirmed)")
		}
	}
	return strings.Join(parts, ", ")
}
