package eventnote

import (
	"fmt"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
)

// MaxBytes is the longest note events.k8s.io accepts, in bytes.
const MaxBytes = 1024

// Truncate shortens s to at most n bytes, on a rune boundary, marking the cut with an ellipsis.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const ellipsis = "…"
	cut := n - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}

// Recorder is an event recorder whose notes are at most MaxBytes, cut by Truncate.
type Recorder struct{ events.EventRecorder }

// Eventf formats the note and emits it, cut to MaxBytes.
func (r Recorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	r.EventRecorder.Eventf(regarding, related, eventtype, reason, action, "%s", Truncate(fmt.Sprintf(note, args...), MaxBytes))
}
