package harness_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/metalheal/metalheal/api/v1alpha1"
	"github.com/metalheal/metalheal/test/harness"
)

// Namespaces and names of the who-may-do-what world.
const (
	teamNS        = "team-a"         // a tenant's namespace: an editor, an admin and a viewer there
	leaseNS       = "medik8s-leases" // the node maintenance leases
	probeName     = "rbac-probe"     // a PowerCycleRemediation in teamNS naming no Node
	leaderElectID = "metalheal-harness"
	// The aggregation labels of the two foreign checkers (DESIGN.md, "Who may ask for a power change").
	capiAggregationLabel    = "cluster.x-k8s.io/aggregate-to-manager"
	medik8sAggregationLabel = "rbac.ext-remediation/aggregate-to-ext-remediation"
)

// subject is who a request is made as: impersonated by the world's administrator.
type subject struct {
	name   string
	user   string
	groups []string
}

func user(name string) subject { return subject{name: name, user: name} }

func serviceAccount(name, namespace, sa string) subject {
	return subject{name: name, user: "system:serviceaccount:" + namespace + ":" + sa,
		groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace}}
}

var (
	editor    = user("alice") // edit in teamNS
	admin     = user("bob")   // admin in teamNS
	viewer    = user("carol") // view in teamNS
	requester = user("dave")  // metalheal-remediation-requester in teamNS
	author    = user("erin")  // metalheal-remediation-author in teamNS
	manager   = serviceAccount("manager", harness.Namespace, "metalheal-manager")
	capi      = serviceAccount("Cluster API's manager", "capi-system", "capi-manager")
	medik8s   = serviceAccount("medik8s' NodeHealthCheck", "medik8s", "node-healthcheck-controller-manager")
	scraper   = serviceAccount("metrics scraper", harness.Namespace, harness.MetricsScraper)
)

// Who may do what under the RBAC config/default deploys, against the real API server (every request is
// real, made as the subject; writes are dry runs) and the real manager's /metrics. The roles that allow
// are proven to be in force by the rows that allow, so the rows that deny are not denials by default.
func TestWhoMayDoWhatUnderDeployedRBAC(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	h := startHarness(t, 1)
	m, err := h.StartManager(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(m.Kill)

	setUpSubjects(ctx, g, h)
	// A request in the tenant's namespace naming no Node: something to read, patch and delete.
	g.Expect(h.Client.Create(ctx, &v1alpha1.PowerCycleRemediation{
		ObjectMeta: metav1.ObjectMeta{Namespace: teamNS, Name: probeName},
	})).To(Succeed())
	// The manager's leader election lease, once it leads.
	g.Eventually(func() error {
		return h.Client.Get(ctx, client.ObjectKey{Namespace: harness.Namespace, Name: leaderElectID}, &coordinationv1.Lease{})
	}).WithTimeout(60*time.Second).WithPolling(250*time.Millisecond).Should(Succeed(), "see %s", m.LogPath)

	dryRun := client.DryRunAll
	request := func(ns, name string) *v1alpha1.PowerCycleRemediation {
		return &v1alpha1.PowerCycleRemediation{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: v1alpha1.PowerCycleRemediationSpec{Strategy: v1alpha1.StrategyPowerOff}}
	}
	bmc := func(ns string) *v1alpha1.BMC {
		return &v1alpha1.BMC{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: harness.NodeName(1)},
			Spec: v1alpha1.BMCSpec{NodeName: harness.NodeName(1), Address: "redfish://bmc.example/redfish/v1/Systems/1",
				CredentialsSecretRef: v1alpha1.SecretReference{Name: "mine"}}}
	}
	template := func(ns string) *v1alpha1.PowerCycleRemediationTemplate {
		return &v1alpha1.PowerCycleRemediationTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rbac-template"}}
	}
	probe := &v1alpha1.PowerCycleRemediation{ObjectMeta: metav1.ObjectMeta{Namespace: teamNS, Name: probeName}}
	lease := func(ns, name string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	}
	get := func(obj client.Object) func(context.Context, client.Client) error {
		return func(ctx context.Context, c client.Client) error {
			return c.Get(ctx, client.ObjectKeyFromObject(obj), obj)
		}
	}
	list := func(l client.ObjectList, opts ...client.ListOption) func(context.Context, client.Client) error {
		return func(ctx context.Context, c client.Client) error { return c.List(ctx, l, opts...) }
	}
	create := func(obj client.Object) func(context.Context, client.Client) error {
		return func(ctx context.Context, c client.Client) error { return c.Create(ctx, obj, dryRun) }
	}
	del := func(obj client.Object) func(context.Context, client.Client) error {
		return func(ctx context.Context, c client.Client) error { return c.Delete(ctx, obj, dryRun) }
	}
	annotate := func(obj client.Object) func(context.Context, client.Client) error {
		return func(ctx context.Context, c client.Client) error {
			patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"remediation.medik8s.io/nhc-timed-out":"2026-01-01T00:00:00Z"}}}`))
			return c.Patch(ctx, obj, patch, dryRun)
		}
	}
	inTeam := client.InNamespace(teamNS)
	check := func(ns string) *v1alpha1.MachineHealthCheck {
		return &v1alpha1.MachineHealthCheck{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rbac-check"},
			Spec: v1alpha1.MachineHealthCheckSpec{Selector: metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}}}
	}
	// An editor's way to the same end as creating a check: make an existing template fence instead of reboot.
	fence := func(ctx context.Context, c client.Client) error {
		patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"template":{"spec":{"strategy":"power-off"}}}}`))
		return c.Patch(ctx, template(teamNS), patch, dryRun)
	}
	// What the API server would allow the subject, asked as the subject (SelfSubjectAccessReview): for the
	// rows whose object the world does not hold (Machines: no Cluster API here) or whose write a dry run
	// cannot express (a status subresource of an object that does not exist). Forbidden when denied.
	can := func(verb, group, resource, subresource, ns string) func(context.Context, client.Client) error {
		return func(ctx context.Context, c client.Client) error {
			ssar := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
				ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Group: group, Resource: resource,
					Subresource: subresource, Namespace: ns}}}
			if err := c.Create(ctx, ssar); err != nil {
				return err
			}
			if !ssar.Status.Allowed {
				return apierrors.NewForbidden(schema.GroupResource{Group: group, Resource: resource}, "", errors.New(ssar.Status.Reason))
			}
			return nil
		}
	}
	const capiGroup, group = "cluster.x-k8s.io", "remediation.metalheal.io"

	rows := []struct {
		who  subject
		may  bool
		what string
		do   func(context.Context, client.Client) error
	}{
		{editor, false, "create a PowerCycleRemediation in its namespace", create(request(teamNS, "worker-1"))},
		{editor, false, "create a BMC in its namespace", create(bmc(teamNS))},
		{editor, false, "delete a PowerCycleRemediation in its namespace", del(probe)},
		{editor, false, "mark a PowerCycleRemediation timed out", annotate(probe)},
		{editor, true, "read a PowerCycleRemediation in its namespace", get(probe.DeepCopy())},
		{editor, true, "list BMCs in its namespace", list(&v1alpha1.BMCList{}, inTeam)},
		{editor, false, "create a MachineHealthCheck in its namespace", create(check(teamNS))},
		{editor, false, "create a PowerCycleRemediationTemplate in its namespace", create(template(teamNS))},
		{editor, false, "make a PowerCycleRemediationTemplate in its namespace fence", fence},
		{editor, true, "read MachineHealthChecks and templates in its namespace", func(ctx context.Context, c client.Client) error {
			if err := c.List(ctx, &v1alpha1.MachineHealthCheckList{}, inTeam); err != nil {
				return err
			}
			return c.Get(ctx, client.ObjectKeyFromObject(template(teamNS)), template(teamNS))
		}},
		{admin, false, "create a MachineHealthCheck in its namespace", create(check(teamNS))},
		{admin, false, "make a PowerCycleRemediationTemplate in its namespace fence", fence},
		{author, true, "create a MachineHealthCheck where it is bound", create(check(teamNS))},
		{author, true, "make a PowerCycleRemediationTemplate fence where it is bound", fence},
		{author, false, "create a MachineHealthCheck elsewhere", create(check(harness.Namespace))},
		{author, false, "create a PowerCycleRemediation", create(request(teamNS, "worker-1"))},
		{admin, false, "create a PowerCycleRemediation in its namespace", create(request(teamNS, "worker-1"))},
		{admin, false, "create a BMC in its namespace", create(bmc(teamNS))},
		{admin, false, "delete a PowerCycleRemediation in its namespace", del(probe)},
		{viewer, true, "read a PowerCycleRemediation in its namespace", get(probe.DeepCopy())},
		{viewer, true, "list PowerCycleRemediations and BMCs in its namespace", func(ctx context.Context, c client.Client) error {
			if err := c.List(ctx, &v1alpha1.PowerCycleRemediationList{}, inTeam); err != nil {
				return err
			}
			return c.List(ctx, &v1alpha1.BMCList{}, inTeam)
		}},
		{viewer, false, "create a PowerCycleRemediationTemplate", create(template(teamNS))},
		{requester, true, "create a PowerCycleRemediation where it is bound", create(request(teamNS, "worker-1"))},
		{requester, false, "create a PowerCycleRemediation elsewhere", create(request(harness.Namespace, "worker-1"))},
		{requester, false, "create a BMC", create(bmc(teamNS))},
		{manager, false, "create a Lease in kube-node-lease", create(lease("kube-node-lease", "rbac-probe"))},
		{manager, false, "delete a kubelet's Lease in kube-node-lease", del(lease("kube-node-lease", harness.NodeName(1)))},
		{manager, false, "create a Lease in kube-system", create(lease("kube-system", "rbac-probe"))},
		{manager, false, "list Leases in every namespace", list(&coordinationv1.LeaseList{})},
		{manager, true, "create a node Lease in " + leaseNS, create(lease(leaseNS, "node-rbac-probe"))},
		{manager, true, "read and renew its leader election Lease", func(ctx context.Context, c client.Client) error {
			l := lease(harness.Namespace, leaderElectID)
			if err := c.Get(ctx, client.ObjectKeyFromObject(l), l); err != nil {
				return err
			}
			return c.Update(ctx, l, dryRun)
		}},
		{manager, false, "read a Secret in another namespace", get(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: teamNS, Name: "bmc-credentials"}})},
		{manager, false, "list Secrets in every namespace", list(&corev1.SecretList{})},
		{manager, true, "read the BMC credentials in its namespace", get(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: harness.Namespace, Name: "bmc-credentials"}})},
		{manager, false, "create a Namespace", create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "rbac-probe"}})},
		{manager, true, "create a PowerCycleRemediation (its health checks)", create(request(teamNS, "worker-1"))},
		{manager, false, "create a BMC", create(bmc(harness.Namespace))},
		{manager, false, "update a BMC", can("update", group, "bmcs", "", harness.Namespace)},
		{manager, false, "patch a BMC", can("patch", group, "bmcs", "", harness.Namespace)},
		{manager, true, "patch a BMC's status (the inventory)", can("patch", group, "bmcs", "status", harness.Namespace)},
		{manager, false, "update a BMC's status", can("update", group, "bmcs", "status", harness.Namespace)},
		{manager, true, "list the BMCs of its namespace", can("list", group, "bmcs", "", harness.Namespace)},
		{manager, false, "list BMCs in every namespace", can("list", group, "bmcs", "", "")},
		{manager, false, "read a BMC in another namespace", can("get", group, "bmcs", "", teamNS)},
		{manager, false, "patch a BMC's status in another namespace", can("patch", group, "bmcs", "status", teamNS)},
		{manager, true, "patch a Machine's status (OwnerRemediated)", can("patch", capiGroup, "machines", "status", teamNS)},
		{manager, false, "update a Machine's status", can("update", capiGroup, "machines", "status", teamNS)},
		{manager, true, "delete a Machine in a namespace it trusts (its own)", can("delete", capiGroup, "machines", "", harness.Namespace)},
		{manager, false, "delete a Machine in a namespace it does not trust", can("delete", capiGroup, "machines", "", teamNS)},
		{manager, true, "update a Node (the remediator's taints)", can("update", "", "nodes", "", "")},
		{manager, false, "patch a Node", can("patch", "", "nodes", "", "")},
		{manager, true, "patch a Node's status (the power watch's PoweredOff condition)", can("patch", "", "nodes", "status", "")},
		{manager, false, "update a Node's status", can("update", "", "nodes", "status", "")},
		{manager, false, "create a MachineHealthCheck", create(check(teamNS))},
		{manager, true, "review a token (its /metrics authentication)", func(ctx context.Context, c client.Client) error {
			return c.Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: "not-a-token"}})
		}},
		{capi, true, "list PowerCycleRemediationTemplates", list(&v1alpha1.PowerCycleRemediationTemplateList{})},
		{capi, true, "create a PowerCycleRemediation", create(request(teamNS, "worker-1"))},
		{capi, true, "delete a PowerCycleRemediation", del(probe)},
		{capi, false, "create a BMC", create(bmc(teamNS))},
		{medik8s, true, "list PowerCycleRemediationTemplates", list(&v1alpha1.PowerCycleRemediationTemplateList{})},
		{medik8s, true, "create a PowerCycleRemediation", create(request(teamNS, "worker-1"))},
		{medik8s, false, "create a BMC", create(bmc(teamNS))},
		{scraper, false, "list Nodes", list(&corev1.NodeList{})},
	}
	clients := map[string]client.Client{}
	for _, row := range rows {
		c, ok := clients[row.who.name]
		if !ok {
			cfg := h.World.RESTConfig()
			cfg.Impersonate = rest.ImpersonationConfig{UserName: row.who.user, Groups: row.who.groups}
			c, err = client.New(cfg, client.Options{Scheme: harness.Scheme()})
			g.Expect(err).NotTo(HaveOccurred())
			clients[row.who.name] = c
		}
		verb := map[bool]string{true: "may", false: "may not"}[row.may]
		t.Run(row.who.name+" "+verb+" "+row.what, func(t *testing.T) {
			err := row.do(ctx, c)
			if row.may {
				NewWithT(t).Expect(err).NotTo(HaveOccurred())
			} else {
				NewWithT(t).Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want forbidden, got %v", err)
			}
		})
	}

	// /metrics, over HTTPS, as the manager serves it: the token is reviewed by the API server and the
	// caller must be allowed to get the /metrics URL (metalheal-metrics-reader).
	unbound, err := h.ServiceAccountToken(ctx, teamNS, "prometheus")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(m.MetricsURL).To(HavePrefix("https://"))
	for _, row := range []struct {
		who, token string
		want       int
	}{
		{"nobody (no token)", "", http.StatusUnauthorized},
		{"a token the API server rejects", "not-a-token", http.StatusUnauthorized},
		{"a service account without metrics-reader", unbound, http.StatusForbidden},
		{"the scraper bound to metrics-reader", h.MetricsToken, http.StatusOK},
	} {
		t.Run("metrics for "+row.who, func(t *testing.T) {
			g := NewWithT(t)
			status, body, err := m.GetMetrics(ctx, row.token)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(status).To(Equal(row.want), "%s", body)
			if row.want == http.StatusOK {
				g.Expect(string(body)).To(ContainSubstring("controller_runtime_reconcile_total"))
			} else {
				g.Expect(string(body)).NotTo(ContainSubstring("controller_runtime"))
			}
		})
	}
}

// setUpSubjects binds the subjects as a cluster admin would, and waits until Kubernetes has aggregated
// metalheal's roles into the built-in and the foreign checkers' roles.
func setUpSubjects(ctx context.Context, g Gomega, h *harness.Harness) {
	g.Expect(h.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: teamNS}})).To(Succeed())
	bind := func(name, kind, role string, s subject, namespace string) {
		subj := rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: s.user}
		if strings.HasPrefix(s.user, "system:serviceaccount:") {
			parts := strings.Split(s.user, ":")
			subj = rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: parts[2], Name: parts[3]}
		}
		ref := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}
		var obj client.Object = &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, RoleRef: ref, Subjects: []rbacv1.Subject{subj}}
		if kind == "RoleBinding" {
			obj = &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, RoleRef: ref, Subjects: []rbacv1.Subject{subj}}
		}
		g.Expect(h.Client.Create(ctx, obj)).To(Succeed())
	}
	bind("alice-edit", "RoleBinding", "edit", editor, teamNS)
	bind("bob-admin", "RoleBinding", "admin", admin, teamNS)
	bind("carol-view", "RoleBinding", "view", viewer, teamNS)
	bind("dave-requests", "RoleBinding", "metalheal-remediation-requester", requester, teamNS)
	bind("erin-authors", "RoleBinding", "metalheal-remediation-author", author, teamNS)
	// A template an authorised author made, which the check of the namespace names.
	g.Expect(h.Client.Create(ctx, &v1alpha1.PowerCycleRemediationTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: teamNS, Name: "rbac-template"},
		Spec: v1alpha1.PowerCycleRemediationTemplateSpec{Template: v1alpha1.PowerCycleRemediationTemplateResource{
			Spec: v1alpha1.PowerCycleRemediationSpec{Strategy: v1alpha1.StrategyReboot}}},
	})).To(Succeed())
	// The foreign checkers' own roles, as Cluster API and medik8s ship them: aggregated, by label.
	for name, label := range map[string]string{"capi-manager": capiAggregationLabel, "medik8s-ext-remediation": medik8sAggregationLabel} {
		g.Expect(h.Client.Create(ctx, &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			AggregationRule: &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{
				{MatchLabels: map[string]string{label: "true"}}}},
		})).To(Succeed())
	}
	bind("capi-manager", "ClusterRoleBinding", "capi-manager", capi, "")
	bind("medik8s-ext-remediation", "ClusterRoleBinding", "medik8s-ext-remediation", medik8s, "")

	for role, resource := range map[string]string{
		"edit": "powercycleremediationtemplates", "admin": "powercycleremediationtemplates", "view": "bmcs",
		"capi-manager": "powercycleremediations", "medik8s-ext-remediation": "powercycleremediations",
		"metalheal-ext-remediation": "powercycleremediations",
	} {
		g.Eventually(func(g Gomega) {
			var r rbacv1.ClusterRole
			g.Expect(h.Client.Get(ctx, client.ObjectKey{Name: role}, &r)).To(Succeed())
			g.Expect(slices.ContainsFunc(r.Rules, func(rule rbacv1.PolicyRule) bool {
				return slices.Contains(rule.APIGroups, v1alpha1.GroupVersion.Group) && slices.Contains(rule.Resources, resource)
			})).To(BeTrue(), "ClusterRole %s aggregates %s", role, resource)
		}).WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
	}
}
