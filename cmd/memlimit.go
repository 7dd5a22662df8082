package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// memoryLimitShare is the part of the container's memory limit the Go runtime aims to stay under; the
// rest is for what the runtime does not count (thread stacks, the binary's text).
const memoryLimitShare = 0.9

// defaultGCPercent is the garbage collector's target when $GOGC is not set: collect when the heap has
// grown by half of what was live after the last collection, rather than Go's default of doubling. The
// manager's live heap is mostly its informer caches (tens of MiB at thousands of Nodes), and its CPU
// use is small: collecting more often costs little CPU and keeps its peak memory well below twice its
// caches (BENCHMARKS.md has the figures).
const defaultGCPercent = 50

// setGCPercent applies defaultGCPercent unless $GOGC chooses; it returns the percentage applied, 0 if
// none.
func setGCPercent(env func(string) string) int {
	if env("GOGC") != "" {
		return 0
	}
	debug.SetGCPercent(defaultGCPercent)
	return defaultGCPercent
}

// cgroupMemoryFiles hold the container's memory limit: cgroup v2 first, then v1.
var cgroupMemoryFiles = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// setMemoryLimit tells the Go runtime the container's memory limit, so that it collects garbage harder
// as it nears the limit rather than being killed at it. An explicit $GOMEMLIMIT wins, and no limit (or
// none readable) leaves the runtime as it is. It returns the limit set, 0 if none.
func setMemoryLimit(fsys fs.FS, env func(string) string) (int64, error) {
	if env("GOMEMLIMIT") != "" {
		return 0, nil
	}
	for _, name := range cgroupMemoryFiles {
		limit, err := readMemoryLimit(fsys, strings.TrimPrefix(name, "/"))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil || limit == 0 {
			return 0, err
		}
		soft := int64(float64(limit) * memoryLimitShare)
		debug.SetMemoryLimit(soft)
		return soft, nil
	}
	return 0, nil
}

// readMemoryLimit reads a cgroup memory limit file: a byte count, or "max" (v2) or a huge number (v1,
// above any real machine's memory) for no limit, both returned as 0.
func readMemoryLimit(fsys fs.FS, name string) (int64, error) {
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("reading the memory limit in /%s: %w", name, err)
	}
	if n <= 0 || n >= 1<<60 {
		return 0, nil
	}
	return n, nil
}

// rootFS is the machine's file system, for setMemoryLimit.
func rootFS() fs.FS { return os.DirFS("/") }
