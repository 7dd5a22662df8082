package monitoring

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"

	"github.com/metalheal/metalheal/internal/testenv"
)

// Paths of the bundle, relative to the repository root.
const (
	RulesPath     = "config/prometheus/rules.yaml"
	MonitorPath   = "config/prometheus/monitor.yaml"
	DashboardPath = "config/grafana/metalheal.json"
)

// RuleGroups is the spec of a PrometheusRule: what a Prometheus rules file holds.
type RuleGroups struct {
	Groups []RuleGroup `json:"groups"`
}

// RuleGroup is one group of rules.
type RuleGroup struct {
	Name     string `json:"name"`
	Interval string `json:"interval,omitempty"`
	Rules    []Rule `json:"rules"`
}

// Rule is an alerting (or recording) rule.
type Rule struct {
	Alert       string            `json:"alert,omitempty"`
	Record      string            `json:"record,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// LoadRules reads the PrometheusRule's spec from the repository.
func LoadRules() (RuleGroups, error) {
	var pr struct {
		APIVersion string         `json:"apiVersion"`
		Kind       string         `json:"kind"`
		Metadata   map[string]any `json:"metadata"`
		Spec       RuleGroups     `json:"spec"`
	}
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), RulesPath))
	if err != nil {
		return RuleGroups{}, err
	}
	if err := yaml.UnmarshalStrict(b, &pr); err != nil {
		return RuleGroups{}, fmt.Errorf("%s: %w", RulesPath, err)
	}
	if pr.Kind != "PrometheusRule" {
		return RuleGroups{}, fmt.Errorf("%s: kind %q, want PrometheusRule", RulesPath, pr.Kind)
	}
	return pr.Spec, nil
}

// WriteRulesFile writes groups as a Prometheus rules file at path.
func WriteRulesFile(groups RuleGroups, path string) error {
	b, err := yaml.Marshal(groups)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// DashboardExprs returns every PromQL expression of the Grafana dashboard (its panels' targets, the
// panels of its rows included, and its query variables).
func DashboardExprs() ([]string, error) {
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), DashboardPath))
	if err != nil {
		return nil, err
	}
	var d struct {
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", DashboardPath, err)
	}
	var exprs []string
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, t := range p.Targets {
				exprs = append(exprs, t.Expr)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(string); ok && v.Type == "query" {
			exprs = append(exprs, q)
		}
		if q, ok := v.Query.(map[string]any); ok && v.Type == "query" {
			if s, ok := q["query"].(string); ok {
				exprs = append(exprs, s)
			}
		}
	}
	return exprs, nil
}

type panel struct {
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}
