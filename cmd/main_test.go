package main

import (
	"slices"
	"testing"
)

// The controllers run in the order of controllerNames, whatever the flag's order: the BMC inventory is
// set up after the remediator it asks which hosts are being power-cycled, and so is the power watch.
func TestParseControllers(t *testing.T) {
	for flag, want := range map[string][]string{
		"bmc,powercycle":              {"powercycle", "bmc"},
		" bmc , nodehealthcheck,bmc ": {"nodehealthcheck", "bmc"},
		"":                            nil,
		"powerwatch,bmc,powercycle,nodehealthcheck,machinehealthcheck": controllerNames,
	} {
		got, err := parseControllers(flag)
		if err != nil {
			t.Errorf("parseControllers(%q): %v", flag, err)
			continue
		}
		if !slices.Equal(got, want) {
			t.Errorf("parseControllers(%q) = %v, want %v", flag, got, want)
		}
	}
	if _, err := parseControllers("powercycle,nope"); err == nil {
		t.Error("an unknown controller must be refused")
	}
}
