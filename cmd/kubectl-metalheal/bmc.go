package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/bmcaccess"
	"github.com/metalheal/metalheal/internal/bmcdrivers"
	"github.com/metalheal/metalheal/pkg/bmc"
)

// BMCCheck is what `bmc check -o json|yaml` prints.
type BMCCheck struct {
	Node      string `json:"node"`
	Namespace string `json:"namespace"`
	BMC       string `json:"bmc,omitempty"`
	Address   string `json:"address,omitempty"`
	// Secret names the credentials Secret (its content is never shown).
	Secret string `json:"secret,omitempty"`
	// PowerState is what the BMC answered; empty when it could not be read.
	PowerState string `json:"powerState,omitempty"`
	// Reason is the BMC condition reason the manager would set (AuthenticationFailed, BMCUnreachable...);
	// empty when the check passed.
	Reason string `json:"reason,omitempty"`
	Error  string `json:"error,omitempty"`
}

// errCheckFailed makes the command exit non-zero after printing its result.
var errCheckFailed = errors.New("the BMC check failed")

func newBMCCommand(o *options) *cobra.Command {
	bmcCmd := &cobra.Command{Use: "bmc", Short: "Look at BMCs"}
	timeout := 30 * time.Second
	var cluster string
	check := &cobra.Command{
		Use:   "check NODE",
		Short: "Read NODE's host power state through its BMC, as the manager would: tests its address and credentials",
		Long: `check reads the BMC object naming NODE (spec.nodeName; with --cluster, of that Cluster API workload
cluster: spec.cluster) and its credentials Secret in the manager's namespace (-n; metalheal-system by
default) with your kubeconfig, builds the driver the manager builds for it and reads the host's power state. It changes nothing. It exits non-zero when the BMC cannot be read, saying why
in the manager's words (AuthenticationFailed: the BMC rejected the Secret's username and password). No
credential is ever printed.`,
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
			host, err := parseHost(args[0], cluster)
			if err != nil {
				return err
			}
			res, err := checkBMC(cmd.Context(), c, ns, host, timeout)
			if err != nil {
				return err
			}
			if perr := o.print(res, res.table); perr != nil {
				return perr
			}
			if res.Error != "" {
				return errCheckFailed
			}
			return nil
		},
	}
	check.Flags().DurationVar(&timeout, "timeout", timeout, "Bound on the BMC's answer")
	check.Flags().StringVar(&cluster, "cluster", "", "NAMESPACE/NAME of the Cluster API Cluster whose workload cluster holds NODE (the BMC's spec.cluster); empty: a Node of the manager's cluster")
	bmcCmd.AddCommand(check)
	return bmcCmd
}

// parseHost is the host of node, of the Cluster API workload cluster --cluster names (NAMESPACE/NAME), or of
// the manager's own cluster when cluster is empty.
func parseHost(node, cluster string) (bmcaccess.Host, error) {
	host := bmcaccess.Host{Node: node}
	if cluster != "" {
		clusterNS, clusterName, ok := strings.Cut(cluster, "/")
		if !ok || clusterNS == "" || clusterName == "" {
			return host, fmt.Errorf("--cluster %q: must be NAMESPACE/NAME of a Cluster API Cluster", cluster)
		}
		host.Cluster = types.NamespacedName{Namespace: clusterNS, Name: clusterName}
	}
	return host, nil
}

// hostBMCs lists the BMCs in ns that power host (spec.nodeName and spec.cluster): one, unless misconfigured.
func hostBMCs(ctx context.Context, c client.Reader, ns string, host bmcaccess.Host) ([]v1alpha1.BMC, error) {
	var list v1alpha1.BMCList
	if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	var found []v1alpha1.BMC
	for _, b := range list.Items {
		if bmcaccess.HostOf(&b) == host {
			found = append(found, b)
		}
	}
	return found, nil
}

// checkBMC finds host's BMC in ns (the one the remediator would use: same node and cluster) and reads its
// power state through the manager's driver code. A failure of the BMC (or of its object or Secret) is in
// the result; only a failure to read the API is an error.
func checkBMC(ctx context.Context, c client.Reader, ns string, host bmcaccess.Host, timeout time.Duration) (*BMCCheck, error) {
	res := &BMCCheck{Node: host.String(), Namespace: ns}
	found, err := hostBMCs(ctx, c, ns, host)
	if err != nil {
		return nil, fmt.Errorf("listing BMCs in namespace %q: %w", ns, err)
	}
	if len(found) != 1 {
		res.Reason = v1alpha1.ReasonBMCNotFound
		if len(found) > 1 {
			res.Reason = v1alpha1.ReasonBMCAmbiguous
		}
		where := "of the manager's cluster (no spec.cluster)"
		if host.Cluster.Name != "" {
			where = "of cluster " + host.Cluster.String()
		}
		res.Error = fmt.Sprintf("%d BMCs in namespace %q power node %q %s; exactly one must", len(found), ns, host.Node, where)
		return res, nil
	}
	b := &found[0]
	res.BMC, res.Address, res.Secret = b.Name, redactAddress(b.Spec.Address), b.Spec.CredentialsSecretRef.Name
	access := bmcaccess.New(c, ns, bmcdrivers.NewRegistry(nil), bmcaccess.Options{RequestTimeout: timeout})
	defer access.CloseAll(ctx)
	d, err := access.ForBMC(ctx, b)
	if err == nil {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		var state bmc.PowerState
		state, err = d.PowerState(ctx)
		res.PowerState = string(state)
	}
	if err != nil {
		res.Reason = bmcaccess.Reason(err)
		if res.Reason == "" {
			return nil, err // the API, not the BMC
		}
		res.Error = err.Error()
		if errors.Is(err, bmc.ErrAuthentication) {
			res.Error = fmt.Sprintf("the BMC rejected the credentials of Secret %s/%s (keys username, password): %v", ns, res.Secret, err)
		}
	}
	return res, nil
}

// redactAddress drops any user information from a BMC address before it is shown.
func redactAddress(addr string) string {
	u, err := url.Parse(addr)
	if err != nil || u.User == nil {
		return addr
	}
	u.User = nil
	return u.String()
}

func (r *BMCCheck) table(w io.Writer) error {
	if r.BMC != "" {
		fmt.Fprintf(w, "BMC %s/%s of node %s at %s (credentials: Secret %s)\n", r.Namespace, r.BMC, r.Node, r.Address, r.Secret)
	}
	if r.Error != "" {
		_, err := fmt.Fprintf(w, "FAILED (%s): %s\n", r.Reason, r.Error)
		return err
	}
	_, err := fmt.Fprintf(w, "OK: power %s; the BMC accepted the credentials\n", r.PowerState)
	return err
}
