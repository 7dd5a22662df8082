package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
)

// managerMetrics scrapes metalheal's manager; nil for a peer (no metrics endpoint) or when it cannot.
func (b *bench) managerMetrics(ctx context.Context) series {
	if b.ctrl.metricsURL == "" {
		return nil
	}
	m, err := scrape(ctx, b.ctrl.metricsURL)
	if err != nil {
		return nil
	}
	return m
}

// series are the samples of a Prometheus text exposition: "name{labels}" → value.
type series map[string]float64

// scrape reads a Prometheus endpoint.
func scrape(ctx context.Context, url string) (series, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scraping %s: %s", url, resp.Status)
	}
	return parseSeries(resp.Body)
}

// parseSeries reads a Prometheus text exposition.
func parseSeries(r io.Reader) (series, error) {
	out := series{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

// sum adds the samples of a metric whose labels contain every one of labels (e.g. `name="bmc"`).
func (s series) sum(name string, labels ...string) float64 {
	var total float64
	for k, v := range s {
		metric, rest, _ := strings.Cut(k, "{")
		if metric != name {
			continue
		}
		ok := true
		for _, l := range labels {
			if !strings.Contains(rest, l) {
				ok = false
				break
			}
		}
		if ok {
			total += v
		}
	}
	return total
}

// Histogram is a Prometheus histogram's change over a phase.
type Histogram struct {
	Count   float64 `json:"count"`
	SumSecs float64 `json:"sumSeconds"`
	// Buckets are cumulative counts by upper bound (seconds, as the metric's "le" label).
	Buckets map[string]float64 `json:"buckets"`
}

// histogram reads a histogram's samples with the given labels.
func (s series) histogram(name string, labels ...string) Histogram {
	h := Histogram{Buckets: map[string]float64{}, Count: s.sum(name+"_count", labels...), SumSecs: s.sum(name+"_sum", labels...)}
	for k, v := range s {
		metric, rest, _ := strings.Cut(k, "{")
		if metric != name+"_bucket" {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(rest, l)
		}
		if !ok {
			continue
		}
		_, le, found := strings.Cut(rest, `le="`)
		if !found {
			continue
		}
		le, _, _ = strings.Cut(le, `"`)
		h.Buckets[le] += v
	}
	return h
}

// minus is the change from before to h.
func (h Histogram) minus(before Histogram) Histogram {
	out := Histogram{Count: h.Count - before.Count, SumSecs: h.SumSecs - before.SumSecs, Buckets: map[string]float64{}}
	for le, v := range h.Buckets {
		out.Buckets[le] = v - before.Buckets[le]
	}
	return out
}

// quantileBound is the upper bound of the bucket that holds quantile q: what a histogram can say.
func (h Histogram) quantileBound(q float64) string {
	if h.Count == 0 {
		return ""
	}
	type bucket struct {
		le    float64
		label string
		n     float64
	}
	var bs []bucket
	for le, n := range h.Buckets {
		v, err := strconv.ParseFloat(le, 64)
		if err != nil {
			continue // +Inf parses; anything else is skipped
		}
		bs = append(bs, bucket{v, le, n})
	}
	sort.Slice(bs, func(i, j int) bool { return bs[i].le < bs[j].le })
	for _, b := range bs {
		if b.n >= q*h.Count {
			return b.label
		}
	}
	return "+Inf"
}
