// Package eventnote keeps what metalheal's events say within what the API server accepts: events.k8s.io
// refuses an event whose note is longer than MaxBytes, and the event is lost. The notes of the remediator
// and of the BMC inventory quote BMC errors, and a BMC (or whoever answers in its place) chooses what its
// errors say.
//
// Truncate cuts a text to a number of bytes on a rune boundary, marking the cut; Recorder is an event
// recorder whose every note is cut to MaxBytes.
package eventnote
