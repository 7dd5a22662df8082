package engine

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestRequeueAfter(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		next  time.Time
		retry time.Duration
		want  time.Duration
	}{
		{name: "nothing pending: the resync period", want: time.Minute},
		{name: "a deadline sooner than the resync", next: now.Add(10 * time.Second), want: 10 * time.Second},
		{name: "a deadline later than the resync: the resync", next: now.Add(time.Hour), want: time.Minute},
		{name: "a retry sooner than the deadline", next: now.Add(30 * time.Second), retry: 5 * time.Second, want: 5 * time.Second},
		{name: "a deadline just passed: at once", next: now.Add(-time.Second), want: time.Nanosecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(RequeueAfter(tc.next, now, time.Minute, tc.retry)).To(Equal(tc.want))
		})
	}
}
