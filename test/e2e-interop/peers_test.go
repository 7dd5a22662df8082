//go:build interop

package interop

import (
	"bytes"
	"os/exec"
)

// managerSupports reports whether the metalheal manager binary has a flag (read from its -help output).
func managerSupports(bin, flag string) bool {
	out, _ := exec.Command(bin, "-help").CombinedOutput()
	return bytes.Contains(out, []byte("-"+flag+" ")) || bytes.Contains(out, []byte("-"+flag+"\n"))
}
