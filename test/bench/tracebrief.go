package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// traceBurst saves a Go execution trace of metalheal's manager from 1 s before a burst's expiry to 2 s
// after it, when --pprof-dir is set, and writes beside it (<name>.trace.txt, and the log) where the
// reconciles around the expiry spent their time: both health checks annotate each reconcile as a task
// with regions (observe, decide, each request's create, status, ...) and log its start's wall clock.
func (b *bench) traceBurst(ctx context.Context, name string, expiry time.Time) {
	if b.ctrl == nil || b.ctrl.pprofAddr == "" {
		return
	}
	b.traces.Go(func() {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(expiry.Add(-time.Second))):
		}
		path := filepath.Join(b.cfg.pprofDir, name+".trace")
		url := fmt.Sprintf("http://%s/debug/pprof/trace?seconds=3", b.ctrl.pprofAddr)
		if err := fetch(ctx, url, path); err != nil {
			logf("tracing %s: %v", name, err)
			return
		}
		out, err := exec.CommandContext(ctx, "go", "tool", "trace", "-d=parsed", path).Output()
		if err != nil {
			logf("reading the trace of %s: %v", name, err)
			return
		}
		brief := briefTrace(out, expiry)
		logf("%s: the manager's reconciles around the expiry (Go execution trace %s):\n%s", name, path, brief)
		if err := os.WriteFile(path+".txt", []byte(brief), 0o644); err != nil {
			logf("writing %s.txt: %v", path, err)
		}
	})
}

// traceLine is one event of `go tool trace -d=parsed`: "M=.. P=.. G=7 RegionBegin Time=123 Task=1 Type="observe"".
var traceLine = regexp.MustCompile(`G=(-?\d+) (TaskBegin|TaskEnd|RegionBegin|RegionEnd|Log) Time=(\d+) (?:ID|Task)=(\d+)(.*)$`)

// traceTask is one reconcile as the trace shows it, its instants in nanoseconds of the trace's clock.
type traceTask struct {
	begin, end int64
	kind       string // NodeHealthCheck, MachineHealthCheck
	check      string
	wall       time.Time // the wall clock at the "start" log
	wallAt     int64     // the trace's clock then
	regions    map[string][][2]int64
}

// briefTrace tells, for each health check reconcile of the trace, when it ran relative to expiry and
// how long its stages took.
func briefTrace(parsed []byte, expiry time.Time) string {
	tasks := map[string]*traceTask{}
	var order []string
	open := map[string]int64{} // goroutine + task + region type -> begin
	sc := bufio.NewScanner(bytes.NewReader(parsed))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := traceLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		g, kind, id, rest := m[1], m[2], m[4], m[5]
		at, _ := strconv.ParseInt(m[3], 10, 64)
		t := tasks[id]
		if t == nil {
			if typ := field(rest, "Type"); kind != "TaskBegin" || (typ != "NodeHealthCheck" && typ != "MachineHealthCheck") {
				continue
			}
			t = &traceTask{begin: at, kind: field(rest, "Type"), regions: map[string][][2]int64{}}
			tasks[id] = t
			order = append(order, id)
			continue
		}
		typ := field(rest, "Type")
		switch kind {
		case "TaskEnd":
			t.end = at
		case "RegionBegin":
			open[g+"/"+id+"/"+typ] = at
		case "RegionEnd":
			if begin, ok := open[g+"/"+id+"/"+typ]; ok {
				t.regions[typ] = append(t.regions[typ], [2]int64{begin, at})
				delete(open, g+"/"+id+"/"+typ)
			}
		case "Log":
			if field(rest, "Category") == "start" {
				check, when, _ := strings.Cut(field(rest, "Message"), " ")
				if w, err := time.Parse(time.RFC3339Nano, when); err == nil {
					t.check, t.wall, t.wallAt = check, w, at
				}
			}
		}
	}
	var out strings.Builder
	for _, id := range order {
		t := tasks[id]
		if t.wall.IsZero() {
			continue
		}
		// ms after expiry of an instant of the trace's clock.
		rel := func(at int64) string {
			return fmt.Sprintf("%+.1f ms", float64(t.wall.Add(time.Duration(at-t.wallAt)).Sub(expiry).Microseconds())/1000)
		}
		fmt.Fprintf(&out, "  %s %s: starts %s", t.kind, t.check, rel(t.begin))
		if t.end > 0 {
			fmt.Fprintf(&out, ", ends %s", rel(t.end))
		}
		// Each kind of region in the order it first began: one alone by its length, several (a create per
		// request, run in parallel) by when the first began, the last began and the last ended.
		for _, rs := range t.regions { // recorded as they ended: by when they began
			slices.SortFunc(rs, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) })
		}
		types := slices.Collect(maps.Keys(t.regions))
		slices.SortFunc(types, func(a, b string) int { return cmp.Compare(t.regions[a][0][0], t.regions[b][0][0]) })
		for _, typ := range types {
			rs := t.regions[typ]
			if len(rs) == 1 {
				fmt.Fprintf(&out, "; %s %.1f ms", typ, float64(rs[0][1]-rs[0][0])/1e6)
				continue
			}
			last := slices.MaxFunc(rs, func(a, b [2]int64) int { return cmp.Compare(a[1], b[1]) })
			fmt.Fprintf(&out, "; %d × %s: the first begun %s, the last begun %s, the last ended %s",
				len(rs), typ, rel(rs[0][0]), rel(rs[len(rs)-1][0]), rel(last[1]))
		}
		out.WriteString("\n")
	}
	if out.Len() == 0 {
		return "  no health check reconcile in the trace\n"
	}
	return out.String()
}

// field is the value of key="value" in the rest of a parsed trace line.
func field(rest, key string) string {
	_, after, ok := strings.Cut(rest, key+`="`)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(after, `"`)
	return v
}
