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
	trace.WithRegion(ctx, "observe", func() { time.Sleep(3 * time.Millisecond) })
	trace.WithRegion(ctx, "decide", func() { time.Sleep(2 * time.Millisecond) })
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			defer trace.StartRegion(ctx, "create").End()
			time.Sleep(5 * time.Millisecond)
		})
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
	for _, want := range []string{"NodeHealthCheck workers: starts +10", "; observe 3.", "; decide 2.", "; status ", "; 3 × create: the first begun +", "the last ended +"} {
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
