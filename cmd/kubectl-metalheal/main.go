package main

import (
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/clock"
)

func main() {
	cmd := newRootCommand(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}, clock.RealClock{})
	if err := cmd.Execute(); err != nil {
		// cobra has printed the error.
		os.Exit(1)
	}
}
