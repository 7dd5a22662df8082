//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/internal/testenv"
	"github.com/metalheal/metalheal/test/harness"
	"github.com/metalheal/metalheal/test/monitoring"
	"github.com/metalheal/metalheal/test/nodesim"
)

const (
	// promStormCooldown is the storm scenario's stormCooldownDuration: the alert fires once the storm has
	// lasted longer, and resolves when the cooldown after the storm ends.
	promStormCooldown = 15 * time.Second
	// promRuleFor replaces every rule's `for:` in the test copy of the rules (5m and more in the shipped
	// ones), and promInterval is the scrape and evaluation interval: the scenario lasts a minute, not hours.
	promRuleFor  = "2s"
	promInterval = "1s"
	stormAlert   = "MetalhealStormLongerThanCooldown"
)

var _ = Describe("Prometheus scraping the manager", func() {
	It("fires the storm alert during a remediation storm and resolves it after the cooldown", func(ctx SpecContext) {
		m := mgrs.ensure(ctx)
		start := time.Now()
		const group = "prom-storm"
		nodes := pool.take(ctx, group, 5)
		failing := nodes[:3]
		reportOnFailure(start, nodes...)

		By("a real Prometheus scrapes the manager with the ServiceMonitor's endpoint settings and evaluates the rules")
		prom := startPrometheus(ctx, m)
		Eventually(func(g Gomega) {
			var targets struct {
				ActiveTargets []struct {
					Health    string `json:"health"`
					LastError string `json:"lastError"`
					ScrapeURL string `json:"scrapeUrl"`
				} `json:"activeTargets"`
			}
			g.Expect(prom.get(ctx, "/api/v1/targets", &targets)).To(Succeed())
			g.Expect(targets.ActiveTargets).To(ConsistOf(And(
				HaveField("ScrapeURL", HavePrefix("https://")), HaveField("Health", "up"))))
		}).WithContext(ctx).WithTimeout(30*time.Second).WithPolling(poll).Should(Succeed(), "see %s", prom.logPath)

		createTemplate(ctx, harness.Namespace, group, remediation())
		createNodeHealthCheck(ctx, group, unhealthyFor(stormConditionDuration), func(n *v1alpha1.NodeHealthCheck) {
			n.Spec.StormCooldownDuration = &metav1.Duration{Duration: promStormCooldown}
		})
		Consistently(func() ([]string, error) { return prom.firing(ctx, group) }).
			WithContext(ctx).WithTimeout(3 * time.Second).WithPolling(poll).ShouldNot(ContainElement(stormAlert))

		By("three of five nodes fail at once: a storm, which outlasts its cooldown")
		failed := time.Now()
		for _, n := range failing {
			Expect(h.Sim.InjectFault(n, nodesim.FaultTransient)).To(Succeed())
		}
		Eventually(func() ([]string, error) { return prom.firing(ctx, group) }).
			WithContext(ctx).WithTimeout(detectWait+promStormCooldown+30*time.Second).WithPolling(poll).
			Should(ContainElement(stormAlert), "see %s", prom.logPath)
		fmt.Fprintf(GinkgoWriter, "%s firing %s after the nodes failed\n", stormAlert, time.Since(failed).Round(time.Second))

		By("one node recovers: the storm ends, and the alert resolves once the cooldown after it is over")
		healed := time.Now()
		Expect(h.Sim.ClearFault(failing[0])).To(Succeed())
		Eventually(func() ([]string, error) { return prom.firing(ctx, group) }).
			WithContext(ctx).WithTimeout(promStormCooldown+60*time.Second).WithPolling(poll).
			ShouldNot(ContainElement(stormAlert), "see %s", prom.logPath)
		resolved := time.Now()
		fmt.Fprintf(GinkgoWriter, "%s resolved %s after a node recovered (cooldown %s)\n", stormAlert, resolved.Sub(healed).Round(time.Second), promStormCooldown)
		Expect(resolved).To(BeTemporally(">", healed.Add(promStormCooldown)), "resolved before the cooldown was over")

		for _, n := range failing[1:] {
			waitRemediated(ctx, n, healed)
		}
		expectSettled(ctx, nodes...)
		expectCheckSettled(ctx, group)
	}, SpecTimeout(scenarioMax))
})

// prometheus is a Prometheus server the spec started.
type prometheus struct {
	url     string
	logPath string
}

// startPrometheus starts Debian's Prometheus scraping m as the ServiceMonitor of config/prometheus says
// (its scheme, path and TLS settings, and a bearer token file: the harness's scraper's token standing for
// Prometheus' own service account token), with a test copy of config/prometheus' rules whose `for:` are
// promRuleFor. It is killed when the spec ends.
func startPrometheus(ctx context.Context, m *harness.Manager) *prometheus {
	GinkgoHelper()
	bin, err := exec.LookPath("prometheus")
	Expect(err).NotTo(HaveOccurred(), "Debian's prometheus package (hack/install-test-deps.sh)")
	dir, err := os.MkdirTemp(h.World.Dir(), "prometheus-")
	Expect(err).NotTo(HaveOccurred())

	groups, err := monitoring.LoadRules()
	Expect(err).NotTo(HaveOccurred())
	for i := range groups.Groups {
		groups.Groups[i].Interval = promInterval
		for j := range groups.Groups[i].Rules {
			if groups.Groups[i].Rules[j].For != "" {
				groups.Groups[i].Rules[j].For = promRuleFor
			}
		}
	}
	Expect(monitoring.WriteRulesFile(groups, filepath.Join(dir, "rules.yaml"))).To(Succeed())

	var sm struct {
		Spec struct {
			Endpoints []struct {
				Scheme          string `json:"scheme"`
				Path            string `json:"path"`
				BearerTokenFile string `json:"bearerTokenFile"`
				TLSConfig       struct {
					InsecureSkipVerify bool `json:"insecureSkipVerify"`
				} `json:"tlsConfig"`
			} `json:"endpoints"`
		} `json:"spec"`
	}
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), monitoring.MonitorPath))
	Expect(err).NotTo(HaveOccurred())
	Expect(yaml.Unmarshal(b, &sm)).To(Succeed())
	Expect(sm.Spec.Endpoints).To(HaveLen(1))
	ep := sm.Spec.Endpoints[0]
	Expect(ep.BearerTokenFile).NotTo(BeEmpty(), "the ServiceMonitor presents a token")
	target, err := url.Parse(m.MetricsURL)
	Expect(err).NotTo(HaveOccurred())
	Expect(target.Scheme).To(Equal(ep.Scheme), "the manager serves what the ServiceMonitor scrapes")

	config := map[string]any{
		"global":     map[string]any{"scrape_interval": promInterval, "evaluation_interval": promInterval},
		"rule_files": []string{filepath.Join(dir, "rules.yaml")},
		"scrape_configs": []any{map[string]any{
			// The job a ServiceMonitor's targets get: the Service's name, which the rules match.
			"job_name":       "metalheal-manager-metrics-service",
			"scheme":         ep.Scheme,
			"metrics_path":   ep.Path,
			"authorization":  map[string]any{"credentials_file": h.MetricsTokenFile},
			"tls_config":     map[string]any{"insecure_skip_verify": ep.TLSConfig.InsecureSkipVerify},
			"static_configs": []any{map[string]any{"targets": []string{target.Host}}},
		}},
	}
	cb, err := yaml.Marshal(config)
	Expect(err).NotTo(HaveOccurred())
	Expect(os.WriteFile(filepath.Join(dir, "prometheus.yml"), cb, 0o644)).To(Succeed())

	l, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	addr := l.Addr().String()
	Expect(l.Close()).To(Succeed())
	p := &prometheus{url: "http://" + addr, logPath: filepath.Join(h.World.LogDir(), "prometheus.log")}
	logFile, err := os.Create(p.logPath)
	Expect(err).NotTo(HaveOccurred())
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr,
		"--web.console.templates=", "--web.console.libraries=")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	Expect(cmd.Start()).To(Succeed())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logFile.Close(); close(done) }()
	DeferCleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	fmt.Fprintf(GinkgoWriter, "started prometheus (pid %d, %s, log %s)\n", cmd.Process.Pid, p.url, p.logPath)
	Eventually(func() error {
		resp, err := http.Get(p.url + "/-/ready")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%d", resp.StatusCode)
		}
		return nil
	}).WithContext(ctx).WithTimeout(30*time.Second).WithPolling(poll).Should(Succeed(), "see %s", p.logPath)
	return p
}

// get reads a Prometheus API path's data into into.
func (p *prometheus) get(ctx context.Context, path string, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body struct {
		Status string          `json:"status"`
		Data   json.RawMessage `json:"data"`
		Error  string          `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return err
	}
	if body.Status != "success" {
		return fmt.Errorf("%s: %s", path, body.Error)
	}
	return json.Unmarshal(body.Data, into)
}

// firing lists the alerts firing now that concern the health check named healthcheck, or no check at all.
func (p *prometheus) firing(ctx context.Context, healthcheck string) ([]string, error) {
	var alerts struct {
		Alerts []struct {
			Labels map[string]string `json:"labels"`
			State  string            `json:"state"`
		} `json:"alerts"`
	}
	if err := p.get(ctx, "/api/v1/alerts", &alerts); err != nil {
		return nil, err
	}
	var names []string
	for _, a := range alerts.Alerts {
		if a.State != "firing" {
			continue
		}
		if c, ok := a.Labels["healthcheck"]; ok && c != healthcheck {
			continue
		}
		names = append(names, a.Labels["alertname"])
	}
	return names, nil
}
