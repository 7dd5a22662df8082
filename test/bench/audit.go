package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// The API server's audit log tells the controller's requests apart by user (the request metrics have no
// user label). The policy logs the controller's requests at Metadata level (verb, resource, time, code)
// and nothing else, so auditing costs the API server next to nothing.

// writeAuditPolicy writes the policy file and returns the kube-apiserver flags that enable it.
func writeAuditPolicy(dir string, users ...string) (map[string][]string, string, error) {
	quoted := make([]string, len(users))
	for i, u := range users {
		quoted[i] = fmt.Sprintf("%q", u)
	}
	policy := fmt.Sprintf(`apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  users: [%s]
- level: None
`, strings.Join(quoted, ", "))
	policyPath := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policyPath, []byte(policy), 0o644); err != nil {
		return nil, "", fmt.Errorf("writing the audit policy: %w", err)
	}
	logPath := filepath.Join(dir, "audit.log")
	return map[string][]string{
		"audit-policy-file": {policyPath},
		"audit-log-path":    {logPath},
		"audit-log-format":  {"json"},
		"audit-log-mode":    {"batch"},
		// Flush often: the log is read when the run ends.
		"audit-log-batch-max-wait": {"1s"},
	}, logPath, nil
}

// auditEvent is the part of an audit.k8s.io/v1 Event the bench reads.
type auditEvent struct {
	AuditID    string `json:"auditID"`
	Stage      string `json:"stage"`
	RequestURI string `json:"requestURI"`
	Verb       string `json:"verb"`
	User       struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		APIGroup    string `json:"apiGroup"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp"`
	StageTimestamp           time.Time `json:"stageTimestamp"`
}

// request is one API request of the controller.
type request struct {
	id string
	at time.Time
	// verb, resource (with subresource), namespace and name of what was asked for.
	verb, resource, namespace, name string
	key                             string // "verb resource[/subresource]"
	// list: a LIST, or a watch that starts by sending the full state (a streaming list).
	list, write bool
	// latency is how long the API server took to answer (writes: from the ResponseComplete stage).
	latency time.Duration
}

// readAudit reads the requests of users from the audit log, once each (a watch is logged when it starts
// and when it ends).
func readAudit(path string, users ...string) ([]request, error) {
	of := map[string]bool{}
	for _, u := range users {
		of[u] = true
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening the audit log: %w", err)
	}
	defer f.Close()
	seen := map[string]bool{}
	var out []request
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e auditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("reading the audit log: %w", err)
		}
		if !of[e.User.Username] {
			continue
		}
		if seen[e.AuditID] {
			if e.Stage == "ResponseComplete" && e.Verb != "watch" {
				// The same request logged again when it completed: keep its latency.
				for i := len(out) - 1; i >= 0 && i >= len(out)-1000; i-- {
					if out[i].id == e.AuditID {
						out[i].latency = e.StageTimestamp.Sub(e.RequestReceivedTimestamp)
						break
					}
				}
			}
			continue
		}
		seen[e.AuditID] = true
		r := request{at: e.RequestReceivedTimestamp, id: e.AuditID}
		if e.Stage == "ResponseComplete" {
			r.latency = e.StageTimestamp.Sub(e.RequestReceivedTimestamp)
		}
		verb := e.Verb
		initial := verb == "watch" && strings.Contains(e.RequestURI, "sendInitialEvents=true")
		if initial {
			verb = "watch(initial-list)"
		}
		what := e.RequestURI
		if i := strings.IndexByte(what, '?'); i >= 0 {
			what = what[:i]
		}
		if e.ObjectRef != nil && e.ObjectRef.Resource != "" {
			what = e.ObjectRef.Resource
			if e.ObjectRef.Subresource != "" {
				what += "/" + e.ObjectRef.Subresource
			}
		}
		r.key = verb + " " + what
		r.verb, r.resource = e.Verb, what
		if e.ObjectRef != nil {
			r.namespace, r.name = e.ObjectRef.Namespace, e.ObjectRef.Name
		}
		r.list = e.Verb == "list" || initial
		switch e.Verb {
		case "create", "update", "patch", "delete", "deletecollection":
			r.write = true
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading the audit log: %w", err)
	}
	return out, nil
}

// attribute counts each request in the phase that was running when it was received. Requests between
// phases (while the bench waits for nodes to recover, say) go to the phase before.
func attribute(phases []*Phase, reqs []request) {
	for _, p := range phases {
		p.Requests = map[string]int{}
	}
	latencies := make([][]float64, len(phases))
	for _, r := range reqs {
		i := sort.Search(len(phases), func(i int) bool { return phases[i].Start.After(r.at) }) - 1
		if i < 0 {
			continue // before start-up: cannot happen for the controller's user
		}
		p := phases[i]
		p.Requests[r.key]++
		p.RequestsTotal++
		if r.list {
			p.Lists++
		}
		if r.write {
			p.Writes++
			if r.latency > 0 {
				latencies[i] = append(latencies[i], float64(r.latency.Microseconds())/1000)
			}
		}
	}
	for i, p := range phases {
		p.WriteLatencyMs = stats(latencies[i])
	}
}
