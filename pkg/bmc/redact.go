package bmc

import (
	"errors"
	"strings"
)

// Redact returns err unchanged, or, when its message contains one of the non-empty secrets, an error
// with the same message where each secret reads "<redacted>". Drivers never put a credential in an
// error on purpose; this is the last line of defence against a BMC or a library echoing one back.
func Redact(err error, secrets ...string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	redacted := msg
	for _, s := range secrets {
		if s != "" {
			redacted = strings.ReplaceAll(redacted, s, "<redacted>")
		}
	}
	if redacted == msg {
		return err
	}
	return errors.New(redacted)
}
