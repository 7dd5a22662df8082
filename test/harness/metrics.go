package harness

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

const (
	// MetricsScraper is the service account (in Namespace) the harness reads the managers' /metrics as:
	// bound to config/default's metalheal-metrics-reader ClusterRole, as a Prometheus would be.
	MetricsScraper = "metrics-scraper"
	// MetricsReaderRole is the ClusterRole config/default gives scrapers.
	MetricsReaderRole = "metalheal-metrics-reader"
	// metricsInsecureFlag makes a manager serve plain HTTP to anyone (the bench passes it).
	metricsInsecureFlag = "--metrics-secure=false"
)

// metricsClient reads the managers' /metrics. The managers serve it over HTTPS with a self-signed
// certificate made at start-up, as deployed: there is no CA to verify it against (a Prometheus scraping
// the deployed Service is configured the same way unless a certificate is mounted). What this client
// proves is the token check, not the certificate.
var metricsClient = &http.Client{
	Timeout:   10 * time.Second,
	Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec // see above
}

// setUpMetricsScraper creates the MetricsScraper service account, binds it to MetricsReaderRole, and
// keeps a token of it (in MetricsToken and the file MetricsTokenFile).
func (h *Harness) setUpMetricsScraper(ctx context.Context) error {
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: MetricsScraper},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: MetricsReaderRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: Namespace, Name: MetricsScraper}},
	}
	if err := h.Client.Create(ctx, binding); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("binding %s to %s: %w", MetricsScraper, MetricsReaderRole, err)
	}
	token, err := h.ServiceAccountToken(ctx, Namespace, MetricsScraper)
	if err != nil {
		return err
	}
	h.MetricsToken = token
	h.MetricsTokenFile = filepath.Join(h.World.Dir(), MetricsScraper+".token")
	return os.WriteFile(h.MetricsTokenFile, []byte(token), 0o600)
}

// ServiceAccountToken creates the service account namespace/name when it is missing and returns a bearer
// token of it (valid for a day) that the world's API server accepts: what a scraper in the cluster would
// present.
func (h *Harness) ServiceAccountToken(ctx context.Context, namespace, name string) (string, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if err := h.Client.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("creating service account %s/%s: %w", namespace, name, err)
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](24 * 3600)}}
	if err := h.Client.SubResource("token").Create(ctx, sa, req); err != nil {
		return "", fmt.Errorf("requesting a token of service account %s/%s: %w", namespace, name, err)
	}
	return req.Status.Token, nil
}

// metricsURL is the URL of a manager's /metrics at port, given its flags.
func metricsURL(port int, args []string) string {
	scheme := "https"
	if slices.Contains(args, metricsInsecureFlag) {
		scheme = "http"
	}
	return fmt.Sprintf("%s://127.0.0.1:%d/metrics", scheme, port)
}

// Metrics reads the manager's /metrics as the harness's MetricsScraper; an answer other than 200 is an
// error.
func (m *Manager) Metrics(ctx context.Context) ([]byte, error) {
	status, body, err := m.GetMetrics(ctx, m.metricsToken)
	if err != nil {
		return nil, err
	}
	if status != http.StatusOK {
		return nil, fmt.Errorf("reading %s: %d %s", m.MetricsURL, status, http.StatusText(status))
	}
	return body, nil
}

// GetMetrics reads the manager's /metrics with a bearer token (none when empty) and returns the status
// code and body.
func (m *Manager) GetMetrics(ctx context.Context, token string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.MetricsURL, nil)
	if err != nil {
		return 0, nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := metricsClient.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("reading %s: %w", m.MetricsURL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, fmt.Errorf("reading %s: %w", m.MetricsURL, err)
	}
	return resp.StatusCode, body, nil
}
