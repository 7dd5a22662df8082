package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestNoteWatchEnds(t *testing.T) {
	start := time.Date(2026, 11, 22, 21, 11, 0, 0, time.Local)
	quiet := &Phase{Name: "power-single", Start: start.Add(-time.Minute), End: start, Lists: 0}
	wave := &Phase{Name: "power-concurrent", Start: start, End: start.Add(time.Minute), Lists: 1}
	later := &Phase{Name: "later", Start: start.Add(time.Minute), End: start.Add(2 * time.Minute), Lists: 2}
	log := strings.Join([]string{
		`I1122 21:10:30.000000   15271 reflector.go:664] "Warning: watch ended with error" reflector="pkg/mod/k8s.io/client-go/tools/cache/reflector.go:290" err="before the wave"`,
		`I1122 21:11:05.123456   15271 reflector.go:664] "Warning: watch ended with error" reflector="pkg/mod/k8s.io/client-go/tools/cache/reflector.go:290" type="*v1alpha1.PowerCycleRemediation" err="very short watch"`,
		`{"level":"info","ts":"2026-11-22T21:11:06Z","msg":"watch ended with error in a JSON line, not the reflector's"}`,
		`I1122 21:11:07.000000   15271 leaderelection.go:272] "Successfully acquired lease"`,
	}, "\n")
	path := filepath.Join(t.TempDir(), "manager.log")
	if err := os.WriteFile(path, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}

	noteWatchEnds([]*Phase{quiet, wave, later}, path)

	if len(quiet.Notes) != 0 {
		t.Errorf("a phase without lists gets no note: %q", quiet.Notes)
	}
	if len(wave.Notes) != 1 || !strings.Contains(wave.Notes[0], `type="*v1alpha1.PowerCycleRemediation" err="very short watch"`) ||
		strings.Contains(wave.Notes[0], "before the wave") || strings.Contains(wave.Notes[0], "JSON line") {
		t.Errorf("the wave's note names its own watch end, and only that: %q", wave.Notes)
	}
	if len(later.Notes) != 1 || !strings.Contains(later.Notes[0], "2 list(s)") || !strings.Contains(later.Notes[0], "no watch of the controller ended with an error") {
		t.Errorf("a relist with nothing in the log says so: %q", later.Notes)
	}
}
