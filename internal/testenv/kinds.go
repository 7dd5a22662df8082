package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// What the tests of a kind the manager cannot watch need: a CRD made at run time, RBAC granted to a user
// the manager impersonates, and a record of the manager's requests per API group.

// Plural is the resource name CRD gives kind.
func Plural(kind string) string { return strings.ToLower(kind) + "s" }

// CRD creates a namespaced CustomResourceDefinition for kind in group (version v1, any content, a status
// subresource) and waits until the API server serves it, at most 30s.
func CRD(ctx context.Context, c client.Client, group, kind string) (*unstructured.Unstructured, error) {
	anything := map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   map[string]any{"name": Plural(kind) + "." + group},
		"spec": map[string]any{
			"group": group,
			"scope": "Namespaced",
			"names": map[string]any{"kind": kind, "listKind": kind + "List", "plural": Plural(kind), "singular": strings.ToLower(kind)},
			"versions": []any{map[string]any{
				"name": "v1", "served": true, "storage": true,
				"subresources": map[string]any{"status": map[string]any{}},
				"schema":       map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "properties": map[string]any{"spec": anything, "status": anything}}},
			}},
		},
	}}
	if err := c.Create(ctx, crd); err != nil {
		return nil, fmt.Errorf("creating the CRD of %s: %w", kind, err)
	}
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(crd), crd); err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
		for _, cond := range conds {
			if m, ok := cond.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for the CRD of %s: %w", kind, err)
	}
	return crd, nil
}

// Grant binds user to a new ClusterRole name with rules and waits (at most 30s) until the API server
// allows user the first rule's first verb; revoke removes both.
func Grant(ctx context.Context, c client.Client, name, user string, rules []rbacv1.PolicyRule) (revoke func(context.Context) error, err error) {
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	for _, o := range []client.Object{role, binding} {
		if err := c.Create(ctx, o); err != nil {
			return nil, fmt.Errorf("granting %s: %w", name, err)
		}
	}
	revoke = func(ctx context.Context) error {
		return errors.Join(client.IgnoreNotFound(c.Delete(ctx, binding)), client.IgnoreNotFound(c.Delete(ctx, role)))
	}
	if len(rules) == 0 || len(rules[0].Verbs) == 0 || len(rules[0].APIGroups) == 0 || len(rules[0].Resources) == 0 {
		return revoke, nil
	}
	r := rules[0]
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return Allowed(ctx, c, user, r.Verbs[0], r.APIGroups[0], r.Resources[0])
	})
	if err != nil {
		return revoke, fmt.Errorf("waiting for %s to take effect: %w", name, err)
	}
	return revoke, nil
}

// Allowed asks the API server whether user may verb resource of group, cluster-wide.
func Allowed(ctx context.Context, c client.Client, user, verb, group, resource string) (bool, error) {
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:               user,
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Group: group, Resource: resource},
	}}
	if err := c.Create(ctx, sar); err != nil {
		return false, err
	}
	return sar.Status.Allowed, nil
}

// RequestLog records the requests a rest.Config's clients make, per API group: how many, and how many
// watches are open now; and per path (lists, watches and reads of one resource). Set it with
// rest.Config.WrapTransport = log.Wrap.
type RequestLog struct {
	mu       sync.Mutex
	requests map[string]int
	open     map[string]int
	byPath   map[string]int
	getsTo   map[string]int
}

// Wrap is a rest.Config.WrapTransport.
func (l *RequestLog) Wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		group := groupOf(req.URL.Path)
		resp, err := rt.RoundTrip(req)
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.requests == nil {
			l.requests, l.open, l.byPath, l.getsTo = map[string]int{}, map[string]int{}, map[string]int{}, map[string]int{}
		}
		l.requests[group]++
		l.byPath[req.URL.Path]++
		if req.Method == http.MethodGet {
			l.getsTo[req.URL.Path]++
		}
		if err == nil && req.URL.Query().Get("watch") == "true" && resp.StatusCode == http.StatusOK {
			l.open[group]++
			resp.Body = &closeHook{ReadCloser: resp.Body, onClose: func() {
				l.mu.Lock()
				defer l.mu.Unlock()
				l.open[group]--
			}}
		}
		return resp, err
	})
}

// Requests is how many requests were made to group's API.
func (l *RequestLog) Requests(group string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.requests[group]
}

// RequestsTo is how many requests were made to path exactly (e.g. /api/v1/nodes: the lists and watches
// of every Node).
func (l *RequestLog) RequestsTo(path string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byPath[path]
}

// GetsTo is how many GET requests were made to path exactly: for a collection (e.g.
// /apis/remediation.metalheal.io/v1alpha1/namespaces/ns/powercycleremediations), the lists and watches of
// the informers that cache it, without the writes.
func (l *RequestLog) GetsTo(path string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.getsTo[path]
}

// OpenWatches is how many watches of group's API are open now.
func (l *RequestLog) OpenWatches(group string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open[group]
}

// groupOf is the API group a request's path is for ("" for the core API and anything else).
func groupOf(path string) string {
	rest, ok := strings.CutPrefix(path, "/apis/")
	if !ok {
		return ""
	}
	group, _, _ := strings.Cut(rest, "/")
	return group
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// closeHook calls onClose once, when the body is closed.
type closeHook struct {
	io.ReadCloser
	once    sync.Once
	onClose func()
}

func (c *closeHook) Close() error {
	c.once.Do(c.onClose)
	return c.ReadCloser.Close()
}
