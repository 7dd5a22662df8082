package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/trace"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestBriefTrace reads a real execution trace of a reconcile annotated as the NodeHealthCheck's is (a
// task, its stages, creates in parallel goroutines) through `go tool trace`, and tells its timeline
// relative to the expiry.
func TestBriefTrace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "burst.trace")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := trace.Start(f); err != nil {
		t.Fatal(err)
	}
	expiry := time.Now().Add(-100 * time.Millisecond) // the reconcile runs some 100 ms after it
	ctx, task := trace.NewTask(context.Background(), "NodeHealthCheck")
	trace.Log(ctx, "start", "workers "+time.Now().UTC().Format(time.RFC3339Nano))
	trace.WithRegion(ctx, "observe", func() {})
	trace.WithRegion(ctx, "decide", func() {})
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() { defer trace.StartRegion(ctx, "create").End() })
	}
	wg.Wait()
	trace.WithRegion(ctx, "status", func() {})
	task.End()
	_, other := trace.NewTask(context.Background(), "BMCInventory") // not a health check's: not told
	other.End()
	trace.Stop()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	parsed, err := exec.Command("go", "tool", "trace", "-d=parsed", path).Output()
	if err != nil {
		t.Fatalf("go tool trace: %v", err)
	}
	brief := briefTrace(parsed, expiry)
	for _, want := range []string{"NodeHealthCheck workers: starts +10", "; observe ", "; decide ", "; status ", "; 3 × create: the first begun +", "the last ended +"} {
		if !strings.Contains(brief, want) {
			t.Errorf("brief lacks %q:\n%s", want, brief)
		}
	}
	if n := strings.Count(brief, "HealthCheck"); n != 1 {
		t.Errorf("%d reconciles told, want 1:\n%s", n, brief)
	}
	if got := briefTrace(nil, expiry); got != "  no health check reconcile in the trace\n" {
		t.Errorf("empty trace: %q", got)
	}
}

// TestBriefTraceTimes: the instants and lengths briefTrace tells, from events of `go tool trace -d=parsed`
// at known times (nanoseconds of the trace's clock); the wall clock logged at 1,000,000 ns is the expiry
// plus 2 ms.
func TestBriefTraceTimes(t *testing.T) {
	expiry := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	wall := expiry.Add(2 * time.Millisecond).Format(time.RFC3339Nano)
	parsed := strings.Join([]string{
		`M=1 P=0 G=7 TaskBegin Time=1000000 ID=4 Parent=0 Type="MachineHealthCheck"`,
		`M=1 P=0 G=7 Log Time=1000000 Task=4 Category="start" Message="default/workers ` + wall + `"`,
		`M=1 P=0 G=7 RegionBegin Time=1000000 Task=4 Type="observe"`,
		`M=1 P=0 G=7 RegionEnd Time=4000000 Task=4 Type="observe"`,
		`M=1 P=0 G=8 RegionBegin Time=5000000 Task=4 Type="create"`,
		`M=1 P=1 G=9 RegionBegin Time=6000000 Task=4 Type="create"`,
		`M=1 P=1 G=9 RegionEnd Time=9000000 Task=4 Type="create"`,
		`M=1 P=0 G=8 RegionEnd Time=21000000 Task=4 Type="create"`,
		`M=1 P=0 G=7 TaskEnd Time=22000000 ID=4 Parent=0 Type="MachineHealthCheck"`,
	}, "\n")
	want := "  MachineHealthCheck default/workers: starts +2.0 ms, ends +23.0 ms; observe 3.0 ms; " +
		"2 × create: the first begun +6.0 ms, the last begun +7.0 ms, the last ended +22.0 ms\n"
	if got := briefTrace([]byte(parsed), expiry); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}
