package eventnote

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/client-go/tools/events"
)

func TestTruncate(t *testing.T) {
	tests := map[string]struct {
		in   string
		n    int
		want string
	}{
		"short enough":            {"abc", 3, "abc"},
		"cut, with an ellipsis":   {"abcdef", 5, "ab…"},
		"never inside a rune":     {"aéééé", 6, "aé…"},
		"back to a rune start":    {"aéééé", 5, "a…"},
		"multi-byte on the bound": {"ééé", 6, "ééé"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			NewWithT(t).Expect(Truncate(tc.in, tc.n)).To(Equal(tc.want))
		})
	}
}

// A note that quotes a long BMC error reaches the API server cut, not refused.
func TestRecorderBoundsTheNote(t *testing.T) {
	g := NewWithT(t)
	fake := events.NewFakeRecorder(1)
	Recorder{fake}.Eventf(nil, nil, "Warning", "BMCNotReady", "PowerCycle", "The BMC said: %s", strings.Repeat("é", MaxBytes))
	note := strings.TrimPrefix(<-fake.Events, "Warning BMCNotReady ")
	g.Expect(note).To(HavePrefix("The BMC said: éé"))
	g.Expect(note).To(HaveSuffix("…"))
	g.Expect(len(note)).To(BeNumerically("<=", MaxBytes))
}
