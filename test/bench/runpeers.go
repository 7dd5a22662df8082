package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// peersCommand is the first argument that makes the bench run the checkers side by side.
const peersCommand = "peers"

// peersConfig is what `bench peers` takes.
type peersConfig struct {
	nodes    int
	runs     int
	checkers []checker
	out      string // the directory of the runs' reports and the summary
	benchArg []string
}

func parsePeersFlags(args []string) (peersConfig, error) {
	var c peersConfig
	var names, extra string
	fs := flag.NewFlagSet("bench peers", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: bench peers [flags]\n\nRuns the same failure schedule against each checker, in a fresh world each run, the checkers\n"+
			"interleaved (every checker's run 1, then every checker's run 2, ...), and prints the medians side by side.\n\n")
		fs.PrintDefaults()
	}
	fs.IntVar(&c.nodes, "nodes", 1000, "Simulated nodes in each world (the MachineHealthChecks' worlds add one Machine per Node).")
	fs.IntVar(&c.runs, "runs", 3, "Runs of each checker.")
	fs.StringVar(&names, "checkers", strings.Join(checkerNames(), ","), "Comma-separated checkers to run, in this order within a round.")
	fs.StringVar(&c.out, "out", "bin/bench-peers", "Directory for each run's JSON report and printed tables (<checker>-run<N>.json, .txt).")
	fs.StringVar(&extra, "bench-args", "", "Flags passed to every run, space-separated (--failures=10 --steady=30s, say; see bench --help).")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.nodes < 2 || c.runs < 1 {
		return c, errors.New("--nodes must be at least 2 and --runs at least 1")
	}
	for _, n := range strings.Split(names, ",") {
		ch, ok := findChecker(strings.TrimSpace(n))
		if !ok {
			return c, fmt.Errorf("--checkers: %q is not one of %s", n, strings.Join(checkerNames(), ", "))
		}
		c.checkers = append(c.checkers, ch)
	}
	c.benchArg = strings.Fields(extra)
	return c, nil
}

// runPeers runs every checker --runs times, round-robin, each run a bench of its own (this executable,
// --checker), and prints the side-by-side table from their reports. A run that fails still counts: its
// report says how far it got.
func runPeers(ctx context.Context, args []string) error {
	cfg, err := parsePeersFlags(args)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.out, 0o755); err != nil {
		return err
	}
	// One world's set-up and start-up settle first: check every run's flags before the first hour is spent.
	for _, c := range cfg.checkers {
		if _, err := parseFlags(runArgs(cfg, c, "x.json")); err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
	}
	start := time.Now()
	table := &peerTable{checkers: cfg.checkers, runs: map[string][]runFigures{}}
	var reports []string
	for run := 1; run <= cfg.runs; run++ {
		for _, c := range cfg.checkers {
			out := filepath.Join(cfg.out, fmt.Sprintf("%s-run%d.json", c.name, run))
			_ = os.Remove(out)
			logf("peers: %s, run %d of %d (%s since the start)", c.name, run, cfg.runs, time.Since(start).Round(time.Second))
			cmd := exec.CommandContext(ctx, self, runArgs(cfg, c, out)...)
			tables, err := os.Create(strings.TrimSuffix(out, ".json") + ".txt")
			if err != nil {
				return err
			}
			cmd.Stdout, cmd.Stderr = tables, os.Stderr // each run's own tables, kept beside its report
			runErr := cmd.Run()
			tables.Close()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			r, err := readReport(out)
			if err != nil {
				// No report: the run died before measuring; it still counts, as a run without figures.
				r = &Report{Error: fmt.Sprintf("no report (%v; %v)", runErr, err)}
			}
			table.runs[c.name] = append(table.runs[c.name], figuresOf(r))
			reports = append(reports, out)
		}
	}
	fmt.Printf("\nmetalheal bench peers, %s: %d nodes, runs of each checker: %d, interleaved; %s in all\n",
		start.UTC().Format("2006-01-02 15:04 UTC"), cfg.nodes, cfg.runs, time.Since(start).Round(time.Second))
	m := machine()
	fmt.Printf("machine: %d CPUs (%s), %.0f GiB; load average at the end %s\n", m.CPUs, m.CPUModel, m.MemoryGiB, loadAvg())
	fmt.Printf("command: %s\n", strings.Join(os.Args, " "))
	table.print(os.Stdout)
	fmt.Printf("\nreports: %s\n", strings.Join(reports, " "))
	return nil
}

// runArgs are the bench flags of one run of checker c.
func runArgs(cfg peersConfig, c checker, out string) []string {
	return append([]string{"--checker=" + c.name, "--nodes=" + strconv.Itoa(cfg.nodes), "--out=" + out}, cfg.benchArg...)
}

func readReport(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	r := &Report{}
	if err := json.Unmarshal(b, r); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return r, nil
}
