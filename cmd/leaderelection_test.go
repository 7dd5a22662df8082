package main

import (
	"testing"
	"time"
)

func TestLeaderElectionTimingValidate(t *testing.T) {
	s := time.Second
	tests := map[string]struct {
		timing  leaderElectionTiming
		wantErr bool
	}{
		"the defaults":                         {leaderElectionTiming{15 * s, 10 * s, 2 * s, 5 * s}, false},
		"a long lease for a slow API server":   {leaderElectionTiming{60 * s, 40 * s, 5 * s, 5 * s}, false},
		"no graceful shutdown wait":            {leaderElectionTiming{15 * s, 10 * s, 2 * s, 0}, false},
		"renew deadline as long as the lease":  {leaderElectionTiming{10 * s, 10 * s, 2 * s, 5 * s}, true},
		"renew deadline longer than the lease": {leaderElectionTiming{10 * s, 12 * s, 2 * s, 5 * s}, true},
		"retries too slow to renew in time":    {leaderElectionTiming{15 * s, 10 * s, 9 * s, 5 * s}, true},
		"no retry period":                      {leaderElectionTiming{15 * s, 10 * s, 0, 5 * s}, true},
		"negative graceful shutdown":           {leaderElectionTiming{15 * s, 10 * s, 2 * s, -s}, true},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			err := tt.timing.validate()
			if (err != nil) != tt.wantErr {
				t.Fatalf("validate() = %v, want error: %v", err, tt.wantErr)
			}
		})
	}
}
