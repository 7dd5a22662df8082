package main

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"
)

// klogHeader is the start of a klog text line: severity, month and day, time of day.
var klogHeader = regexp.MustCompile(`^[IWEF](\d{4}) (\d{2}:\d{2}:\d{2}\.\d{6})`)

// watchEnds are the client-go reflector's messages for a watch that ended in a way that makes it list
// again (at the default verbosity; a watch refused as too old is logged only at -v=4).
var watchEnds = []string{"watch ended with error", "very short watch"}

// noteWatchEnds adds to each phase after start-up in which the controller listed again (a LIST, or a
// watch that starts with the full state) the reflector's reasons from the controller's log, so that a
// relist can be told from a poll: client-go lists again whenever a resumed watch fails.
func noteWatchEnds(phases []*Phase, logPath string) {
	var relisted []*Phase
	for _, p := range phases {
		if p.Name != "startup" && p.Lists > 0 {
			relisted = append(relisted, p)
		}
	}
	if len(relisted) == 0 || logPath == "" {
		return
	}
	f, err := os.Open(logPath)
	if err != nil {
		return
	}
	defer func() { _ = f.Close() }()
	found := map[*Phase][]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if !slices.ContainsFunc(watchEnds, func(end string) bool { return strings.Contains(line, end) }) {
			continue
		}
		m := klogHeader.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		// klog leaves out the year: the run's.
		at, err := time.ParseInLocation("2006 0102 15:04:05.000000", fmt.Sprintf("%d %s %s", relisted[0].Start.Year(), m[1], m[2]), time.Local)
		if err != nil {
			continue
		}
		for _, p := range relisted {
			if !at.Before(p.Start) && !at.After(p.End) {
				found[p] = append(found[p], strings.TrimSpace(line[strings.Index(line, "]")+1:]))
			}
		}
	}
	for _, p := range relisted {
		lines := found[p]
		if len(lines) == 0 {
			p.Notes = append(p.Notes, fmt.Sprintf("%d list(s) after start-up; no watch of the controller ended with an error in its log in this phase (a resumed watch refused as too old, 410, is logged by client-go only at -v=4)", p.Lists))
			continue
		}
		p.Notes = append(p.Notes, fmt.Sprintf("%d list(s) after start-up; the controller's watches that ended with an error in this phase (client-go lists again after each): %s", p.Lists, strings.Join(lines, "; ")))
	}
}
