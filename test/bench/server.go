package main

import (
	"bytes"
	"context"
	"strings"
	"time"
)

// The API server's and etcd's own account of a phase, to tell where a late watch event or a slow write
// waited: in the API server's fairness queues, behind a slow watcher the API server finally closed, or
// in etcd's watch streams.

// serverCounters reads the API server's counters whose change over a phase is recorded in
// Phase.Server; nil when it cannot.
func (b *bench) serverCounters() map[string]float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	raw, err := b.kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil
	}
	m, err := parseSeries(bytes.NewReader(raw))
	if err != nil {
		return nil
	}
	out := map[string]float64{}
	for k, v := range m {
		metric, labels, _ := strings.Cut(k, "{")
		switch metric {
		case "apiserver_flowcontrol_request_wait_duration_seconds_sum", "apiserver_flowcontrol_request_wait_duration_seconds_count":
			if strings.Contains(labels, `execute="true"`) {
				out["apf wait "+suffix(metric)+" "+label(labels, "priority_level")] += v
			}
		case "apiserver_flowcontrol_rejected_requests_total":
			out["apf rejected "+label(labels, "priority_level")] += v
		case "apiserver_terminated_watchers_total":
			resource := label(labels, "resource")
			if g := label(labels, "group"); g != "" {
				resource += "." + g
			}
			out["terminated watchers "+resource] += v
		case "etcd_request_duration_seconds_sum", "etcd_request_duration_seconds_count":
			op := label(labels, "operation")
			out["etcd "+op+" "+suffix(metric)] += v
			// An update the API server tried against its watch cache's copy of the object, found stale
			// and did again costs a read from etcd (and the update's work twice); a delete reads too.
			if r := b.emrGVR; suffix(metric) == "count" && label(labels, "resource") == r.Resource && label(labels, "group") == r.Group &&
				(op == "get" || op == "update") {
				out["requests etcd "+op] += v
			}
		}
	}
	return out
}

// etcdGauges reads etcd's watch gauges, whose largest value in a phase is recorded in Phase.Peaks; nil
// when it cannot.
func (b *bench) etcdGauges() map[string]float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	m, err := scrape(ctx, b.h.World.EtcdURL()+"/metrics")
	if err != nil {
		return nil
	}
	return map[string]float64{
		"etcd slow watchers":  m.sum("etcd_debugging_mvcc_slow_watcher_total"),
		"etcd pending events": m.sum("etcd_debugging_mvcc_pending_events_total"),
		"etcd watch streams":  m.sum("etcd_debugging_mvcc_watch_stream_total"),
		"etcd watchers":       m.sum("etcd_debugging_mvcc_watcher_total"),
	}
}

// suffix is "sum" or "count" of a histogram's series name.
func suffix(metric string) string {
	return metric[strings.LastIndexByte(metric, '_')+1:]
}

// label is the value of one label in a series' labels (`a="x",b="y"}`), or "".
func label(labels, name string) string {
	for _, prefix := range []string{name + `="`, "," + name + `="`} {
		i := strings.Index(labels, prefix)
		if i < 0 || (prefix[0] != ',' && i != 0) {
			continue
		}
		v, _, _ := strings.Cut(labels[i+len(prefix):], `"`)
		return v
	}
	return ""
}
