package logging

import (
	"runtime"
	"strconv"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	. "github.com/onsi/gomega"
)

// countingSink counts the values its logger was given, to tell when they are encoded.
type countingSink struct {
	logr.LogSink
	withValues *int
}

func (c countingSink) WithValues(kv ...any) logr.LogSink {
	*c.withValues++
	return countingSink{LogSink: c.LogSink.WithValues(kv...), withValues: c.withValues}
}

func (c countingSink) WithName(name string) logr.LogSink {
	return countingSink{LogSink: c.LogSink.WithName(name), withValues: c.withValues}
}

func (c countingSink) WithCallDepth(depth int) logr.LogSink {
	return countingSink{LogSink: c.LogSink.(logr.CallDepthLogSink).WithCallDepth(depth), withValues: c.withValues}
}

func TestLazyEncodesValuesOnlyForLinesWritten(t *testing.T) {
	g := NewWithT(t)
	var lines []string
	base := funcr.New(func(prefix, args string) { lines = append(lines, prefix+" "+args) }, funcr.Options{Verbosity: 1})
	var withValues int
	base = logr.New(countingSink{LogSink: base.GetSink(), withValues: &withValues})

	log := Lazy(base).WithName("bmc").WithValues("controller", "bmc")
	for i := range 100 { // reconciles that write nothing at the default verbosity
		log.WithValues("reconcileID", i).V(4).Info("Checked BMC")
	}
	g.Expect(lines).To(BeEmpty())
	g.Expect(withValues).To(BeZero(), "no values encoded for lines not written")

	line := log.WithValues("reconcileID", 100)
	line.Info("BMC state changed", "reachable", true)
	line.V(1).Info("Host power state changed")
	g.Expect(lines).To(HaveLen(2))
	g.Expect(lines[0]).To(Equal(`bmc "level"=0 "msg"="BMC state changed" "controller"="bmc" "reconcileID"=100 "reachable"=true`),
		"the name, and the values in order")
	g.Expect(lines[1]).To(ContainSubstring(`"controller"="bmc" "reconcileID"=100`))
	g.Expect(withValues).To(Equal(1), "the values are encoded once, for the first line, and reused")

	log.Error(nil, "failed", "k", "v")
	g.Expect(lines[2]).To(ContainSubstring(`"msg"="failed" "error"=null "controller"="bmc" "k"="v"`))
}

// The caller a line names is the caller's own line, helpers (WithCallDepth) included.
func TestLazyKeepsTheCaller(t *testing.T) {
	g := NewWithT(t)
	var lines []string
	log := Lazy(funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{LogCaller: funcr.All}))
	helper := func(l logr.Logger) { l.WithCallDepth(1).Info("from a helper") }
	_, _, at, _ := runtime.Caller(0)
	log.WithValues("k", "v").Info("direct")
	helper(log.WithValues("k", "v"))
	g.Expect(lines).To(Equal([]string{
		`"caller"={"file"="lazy_test.go" "line"=` + strconv.Itoa(at+1) + `} "level"=0 "msg"="direct" "k"="v"`,
		`"caller"={"file"="lazy_test.go" "line"=` + strconv.Itoa(at+2) + `} "level"=0 "msg"="from a helper" "k"="v"`,
	}))
}
