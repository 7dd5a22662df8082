//go:build interop

package interop

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// requestDiff is where two remediation requests made by two checkers differ: each path (a field, a map
// key as [key], an owner reference as [apiVersion Kind]) with what each side has there.
type requestDiff []diffEntry

type diffEntry struct {
	path         string
	ours, theirs string // "" when absent
}

func (d requestDiff) paths() []string {
	var p []string
	for _, e := range d {
		p = append(p, e.path)
	}
	return p
}

func (d requestDiff) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-70s %-45s %s\n", "path", "metalheal", "peer")
	for _, e := range d {
		fmt.Fprintf(&b, "%-70s %-45s %s\n", e.path, orAbsent(e.ours), orAbsent(e.theirs))
	}
	return b.String()
}

func orAbsent(s string) string {
	if s == "" {
		return "(absent)"
	}
	return s
}

// volatile are the fields every object has its own value of: not a difference between checkers.
var volatile = []string{"metadata.uid", "metadata.resourceVersion", "metadata.creationTimestamp",
	"metadata.generation", "metadata.managedFields"}

// compareRequests compares the request metalheal's checker made (ours) with the peer's (theirs), field by
// field, after replacing each side's own names (its node, its Machine, their UIDs) by placeholders
// (replace: value → placeholder, applied to whole values and inside them).
func compareRequests(ours, theirs *unstructured.Unstructured, replace map[string]string) requestDiff {
	a, b := flatten(ours, replace), flatten(theirs, replace)
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	// An owner reference or a map entry present on one side only is one difference, not one per field.
	elements := map[string]bool{}
	var diff requestDiff
	var sorted []string
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	for _, k := range sorted {
		va, inA := a[k]
		vb, inB := b[k]
		if inA && inB && va == vb {
			continue
		}
		if el, ok := ownerElement(k); ok && (!hasPrefix(a, el) || !hasPrefix(b, el)) {
			if !elements[el] {
				elements[el] = true
				diff = append(diff, diffEntry{path: el, ours: present(a, el), theirs: present(b, el)})
			}
			continue
		}
		diff = append(diff, diffEntry{path: k, ours: va, theirs: vb})
	}
	return diff
}

// flatten maps each leaf of obj (volatile fields left out) to its value, placeholders substituted.
func flatten(obj *unstructured.Unstructured, replace map[string]string) map[string]string {
	o := obj.DeepCopy()
	for _, f := range volatile {
		unstructured.RemoveNestedField(o.Object, strings.Split(f, ".")...)
	}
	out := map[string]string{}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch t := v.(type) {
		case map[string]any:
			for k, e := range t {
				p := path + "." + k
				if path == "metadata.annotations" || path == "metadata.labels" {
					p = path + "[" + k + "]"
				}
				walk(strings.TrimPrefix(p, "."), e)
			}
		case []any:
			for i, e := range t {
				key := fmt.Sprint(i)
				if path == "metadata.ownerReferences" {
					ref := e.(map[string]any)
					key = fmt.Sprintf("%v %v", ref["apiVersion"], ref["kind"])
				}
				walk(path+"["+key+"]", e)
			}
		default:
			out[path] = substitute(fmt.Sprint(t), replace)
		}
	}
	walk("", o.Object)
	return out
}

func substitute(s string, replace map[string]string) string {
	if p, ok := replace[s]; ok {
		return p
	}
	// Longer values first, so that "worker-10" is not read as "worker-1" and a "0".
	keys := make([]string, 0, len(replace))
	for k := range replace {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return len(b) - len(a) })
	for _, k := range keys {
		s = strings.ReplaceAll(s, k, replace[k])
	}
	return s
}

// ownerElement returns the owner reference a path is inside of.
func ownerElement(path string) (string, bool) {
	if !strings.HasPrefix(path, "metadata.ownerReferences[") {
		return "", false
	}
	end := strings.Index(path, "]")
	return path[:end+1], true
}

func hasPrefix(m map[string]string, prefix string) bool {
	for k := range m {
		if strings.HasPrefix(k, prefix) {
			return true
		}
	}
	return false
}

// present summarises an owner reference on one side: its name, and whether it is the controller.
func present(m map[string]string, el string) string {
	if !hasPrefix(m, el) {
		return ""
	}
	s := "name=" + m[el+".name"]
	if m[el+".controller"] == "true" {
		s += " controller"
	}
	return s
}
