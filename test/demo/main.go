package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/utils/clock"
)

func main() {
	opts := options{Clock: clock.RealClock{}}
	flag.StringVar(&opts.Story, "story", storyKubeletHang, "The story to tell: "+storyKubeletHang+" (a kubelet hangs; the node lifecycle controller and the check's duration find it) or "+
		storyPowerCut+" (a host's power is cut; it is fenced on its BMC's word, its Node still Ready, and the time from the cut to the taint is printed).")
	flag.BoolVar(&opts.DropEventStream, "drop-event-stream", false, "With --story="+storyPowerCut+": switch the simulator's event service off before the cut, dropping the manager's streams, so that only its poll (every 5s) tells of the cut.")
	flag.IntVar(&opts.Workers, "workers", 4, "Number of simulated hosts (nodes), at least 2; worker-2 is the one that breaks.")
	flag.BoolVar(&opts.Keep, "keep", false, "Leave everything running at the end, print a kubeconfig to look around with kubectl; Ctrl-C stops it.")
	flag.DurationVar(&opts.Timeout, "timeout", 3*time.Minute, "Bound on the demo once the manager is built: the local world's start, the story and the final checks.")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, opts, os.Stdout)
	switch {
	case err == nil:
	case ctx.Err() != nil && errors.Is(err, context.Canceled):
		fmt.Fprintf(os.Stderr, "\ndemo %v\n", err)
		stop()
		os.Exit(130)
	default:
		fmt.Fprintf(os.Stderr, "\ndemo FAILED: %v\n", err)
		stop()
		os.Exit(1)
	}
}
