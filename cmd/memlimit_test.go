package main

import (
	"runtime/debug"
	"testing"
	"testing/fstest"

	. "github.com/onsi/gomega"
)

func TestSetMemoryLimitFollowsTheContainer(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1)) // restore whatever the test binary had
	noEnv := func(string) string { return "" }
	for name, tc := range map[string]struct {
		files   fstest.MapFS
		env     func(string) string
		want    int64
		wantErr string
	}{
		"cgroup v2 limit":     {files: fstest.MapFS{"sys/fs/cgroup/memory.max": {Data: []byte("268435456\n")}}, env: noEnv, want: 241591910},
		"cgroup v2, no limit": {files: fstest.MapFS{"sys/fs/cgroup/memory.max": {Data: []byte("max\n")}}, env: noEnv},
		"cgroup v1 limit":     {files: fstest.MapFS{"sys/fs/cgroup/memory/memory.limit_in_bytes": {Data: []byte("536870912")}}, env: noEnv, want: 483183820},
		"cgroup v1, no limit": {files: fstest.MapFS{"sys/fs/cgroup/memory/memory.limit_in_bytes": {Data: []byte("9223372036854771712")}}, env: noEnv},
		"no cgroup files":     {files: fstest.MapFS{}, env: noEnv},
		"GOMEMLIMIT wins": {files: fstest.MapFS{"sys/fs/cgroup/memory.max": {Data: []byte("268435456")}},
			env: func(k string) string { return map[string]string{"GOMEMLIMIT": "100MiB"}[k] }},
		"garbage": {files: fstest.MapFS{"sys/fs/cgroup/memory.max": {Data: []byte("lots")}}, env: noEnv, wantErr: "reading the memory limit in /sys/fs/cgroup/memory.max"},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			debug.SetMemoryLimit(1 << 40)
			got, err := setMemoryLimit(tc.files, tc.env)
			if tc.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.wantErr)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
			if tc.want > 0 {
				g.Expect(debug.SetMemoryLimit(-1)).To(Equal(tc.want), "the runtime's limit")
			} else {
				g.Expect(debug.SetMemoryLimit(-1)).To(Equal(int64(1<<40)), "the runtime's limit is left alone")
			}
		})
	}
}

func TestSetGCPercentLeavesAnExplicitGOGC(t *testing.T) {
	g := NewWithT(t)
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	g.Expect(setGCPercent(func(string) string { return "" })).To(Equal(defaultGCPercent))
	g.Expect(debug.SetGCPercent(100)).To(Equal(defaultGCPercent), "the runtime's target")

	g.Expect(setGCPercent(func(k string) string { return map[string]string{"GOGC": "200"}[k] })).To(Equal(0))
	g.Expect(debug.SetGCPercent(100)).To(Equal(100), "left as the environment set it")
}
