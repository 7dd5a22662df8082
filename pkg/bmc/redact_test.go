package bmc

import (
	"errors"
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
)

func TestRedact(t *testing.T) {
	cause := errors.New("boom")
	for _, tc := range []struct {
		name     string
		err      error
		secrets  []string
		wantMsg  string
		wantSame bool
	}{
		{name: "nil", err: nil},
		{name: "no secret inside keeps the error", err: fmt.Errorf("dial: %w", cause), secrets: []string{"hunter2"}, wantMsg: "dial: boom", wantSame: true},
		{name: "empty secrets are ignored", err: cause, secrets: []string{"", ""}, wantMsg: "boom", wantSame: true},
		{name: "secret replaced everywhere", err: errors.New("auth hunter2 failed: hunter2"), secrets: []string{"hunter2"}, wantMsg: "auth <redacted> failed: <redacted>"},
		{name: "several secrets", err: errors.New("Basic YWRtaW46aHVudGVyMg== / hunter2"), secrets: []string{"hunter2", "YWRtaW46aHVudGVyMg=="}, wantMsg: "Basic <redacted> / <redacted>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got := Redact(tc.err, tc.secrets...)
			if tc.err == nil {
				g.Expect(got).To(BeNil())
				return
			}
			g.Expect(got.Error()).To(Equal(tc.wantMsg))
			if tc.wantSame {
				g.Expect(got).To(BeIdenticalTo(tc.err))
			}
		})
	}
}
