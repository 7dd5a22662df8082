package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/metalheal/metalheal/api/v1alpha1"
)

// Defaults of config/default: where the manager, its BMCs and their Secrets live, and the node leases.
const (
	defaultManagerNamespace = "metalheal-system"
	defaultLeaseNamespace   = "medik8s-leases"
)

// options are what every command shares: the kubeconfig flags, the output format and the streams.
type options struct {
	config  *genericclioptions.ConfigFlags
	output  string
	streams genericiooptions.IOStreams
	clock   clock.PassiveClock
}

func newRootCommand(streams genericiooptions.IOStreams, clk clock.PassiveClock) *cobra.Command {
	o := &options{config: genericclioptions.NewConfigFlags(true), streams: streams, clock: clk}
	root := &cobra.Command{
		Use:   "kubectl-metalheal",
		Short: "Look at metalheal's health checks, a node's remediation and its BMC",
		Long: `kubectl metalheal shows what metalheal is doing, with your kubeconfig's credentials.

  kubectl metalheal status              health checks, their budgets and storms, remediations, BMCs not ready
  kubectl metalheal timeline NODE       what happened to NODE: failure, power cycle, recovery, times since the failure
  kubectl metalheal history NODE        NODE's last ended remediations, as its BMC records them
  kubectl metalheal bmc check NODE      read NODE's host power state through its BMC (tests address and credentials)`,
		SilenceUsage: true,
		// kubectl runs the plugin as "kubectl metalheal": say so in usage lines.
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl metalheal"},
	}
	o.config.AddFlags(root.PersistentFlags())
	root.PersistentFlags().StringVarP(&o.output, "output", "o", "", "Output format: json or yaml (default: a table)")
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	root.AddCommand(newStatusCommand(o), newTimelineCommand(o), newHistoryCommand(o), newBMCCommand(o))
	return root
}

// validate checks the output flag.
func (o *options) validate() error {
	switch o.output {
	case "", "json", "yaml":
		return nil
	}
	return fmt.Errorf("--output %q: must be json or yaml", o.output)
}

// client returns a client for the cluster of the kubeconfig flags.
func (o *options) client() (client.Client, error) {
	cfg, err := o.config.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("reading the kubeconfig: %w", err)
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, coordinationv1.AddToScheme, eventsv1.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("connecting to the cluster: %w", err)
	}
	return c, nil
}

// namespace is the kubeconfig's namespace when the user chose one (--namespace or the context's), else
// fallback.
func (o *options) namespace(fallback string) (string, error) {
	ns, explicit, err := o.config.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return "", fmt.Errorf("reading the kubeconfig: %w", err)
	}
	if !explicit && (o.config.Namespace == nil || *o.config.Namespace == "") {
		return fallback, nil
	}
	return ns, nil
}

// print writes v as JSON or YAML when -o says so, else calls table.
func (o *options) print(v any, table func(w io.Writer) error) error {
	switch o.output {
	case "json":
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(o.streams.Out, string(b))
		return err
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = o.streams.Out.Write(b)
		return err
	}
	return table(o.streams.Out)
}

// orDash is s, or "-" when it is empty (a table cell).
func orDash(s string) string {
	if strings.TrimSpace(s) == "" {
		return "-"
	}
	return s
}
