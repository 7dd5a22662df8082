package monitoring

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/yaml"

	"github.com/metalheal/metalheal/internal/testenv"
)

// promtool finds Debian's promtool; its absence fails the test (make test installs it).
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool not found (Debian's prometheus package; run hack/install-test-deps.sh): %v", err)
	}
	return p
}

// rulesDir writes the PrometheusRule's rules as rules.yaml, with the promtool unit tests beside it, into a
// temporary directory, and returns it.
func rulesDir(t *testing.T) string {
	t.Helper()
	groups, err := LoadRules()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := WriteRulesFile(groups, filepath.Join(dir, "rules.yaml")); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(filepath.Join("testdata", "alerts_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts_test.yaml"), tests, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func runPromtool(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	t.Logf("promtool %s:\n%s", strings.Join(args, " "), out.String())
}

func TestRulesPassPromtoolCheck(t *testing.T) {
	runPromtool(t, rulesDir(t), "check", "rules", "rules.yaml")
}

func TestAlertsPassTheirPromtoolUnitTests(t *testing.T) {
	runPromtool(t, rulesDir(t), "test", "rules", "alerts_test.yaml")
}

// Every alert has a unit test case where it fires and one where it stays silent.
func TestEveryAlertIsUnitTested(t *testing.T) {
	g := NewWithT(t)
	groups, err := LoadRules()
	g.Expect(err).NotTo(HaveOccurred())
	b, err := os.ReadFile(filepath.Join("testdata", "alerts_test.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	var file struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	g.Expect(yaml.Unmarshal(b, &file)).To(Succeed())
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range file.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				silent[a.Alertname] = true
			}
		}
	}
	alerts := 0
	for _, grp := range groups.Groups {
		for _, r := range grp.Rules {
			if r.Alert == "" {
				continue
			}
			alerts++
			g.Expect(fires).To(HaveKey(r.Alert), "no unit test fires %s", r.Alert)
			g.Expect(silent).To(HaveKey(r.Alert), "no unit test leaves %s silent", r.Alert)
		}
	}
	g.Expect(alerts).To(BeNumerically(">=", 10))
}

// Every alert has a severity, a summary, a description and a runbook_url naming a section of
// docs/operations.md.
func TestEveryAlertHasARunbook(t *testing.T) {
	g := NewWithT(t)
	groups, err := LoadRules()
	g.Expect(err).NotTo(HaveOccurred())
	doc, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "docs", "operations.md"))
	g.Expect(err).NotTo(HaveOccurred())
	anchors := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#+ (.+)$`).FindAllStringSubmatch(string(doc), -1) {
		anchors[githubAnchor(m[1])] = true
	}
	const base = "https://github.com/metalheal/metalheal/blob/main/docs/operations.md#"
	for _, grp := range groups.Groups {
		for _, r := range grp.Rules {
			if r.Alert == "" {
				continue
			}
			g.Expect(r.Labels).To(HaveKeyWithValue("severity", BeElementOf("critical", "warning", "info")), r.Alert)
			g.Expect(r.Annotations).To(And(HaveKey("summary"), HaveKey("description")), r.Alert)
			url := r.Annotations["runbook_url"]
			g.Expect(url).To(Equal(base+strings.ToLower(r.Alert)), "%s's runbook_url", r.Alert)
			g.Expect(anchors).To(HaveKey(strings.TrimPrefix(url, base)), "docs/operations.md has no section %s", r.Alert)
		}
	}
}

// githubAnchor is the anchor GitHub gives a Markdown heading.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || ('a' <= r && r <= 'z') || ('0' <= r && r <= '9'):
			b.WriteRune(r)
		}
	}
	return b.String()
}
