package main

import (
	"slices"
	"testing"
)

// --remediation-namespaces: names separated by commas, blanks ignored, sorted, no repeats; a name that
// cannot be a namespace stops the manager rather than trusting nothing (or something else) silently.
func TestParseNamespaces(t *testing.T) {
	for flag, want := range map[string][]string{
		"":                          nil,
		" , ":                       nil,
		"capi-a":                    {"capi-a"},
		" capi-b , capi-a,,capi-b ": {"capi-a", "capi-b"},
	} {
		got, err := parseNamespaces(flag)
		if err != nil {
			t.Errorf("parseNamespaces(%q): %v", flag, err)
			continue
		}
		if !slices.Equal(got, want) {
			t.Errorf("parseNamespaces(%q) = %v, want %v", flag, got, want)
		}
	}
	for _, bad := range []string{"Team-A", "capi-a,*", "a/b", "capi_a"} {
		if _, err := parseNamespaces(bad); err == nil {
			t.Errorf("parseNamespaces(%q) must be refused", bad)
		}
	}
}
