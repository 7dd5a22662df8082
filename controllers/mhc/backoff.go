package mhc

import (
	v1alpha1 "github.com/metalheal/metalheal/api/v1alpha1"
)

// recentRemediations is the new status.recentRemediations, once execute has dropped the records of the
// requests it could not create: the memory, with the first request of every remediation in status as a
// start.
func (p *plan) recentRemediations() []v1alpha1.RecentRemediation {
	for _, um := range p.Status.UnhealthyMachines {
		if len(um.Remediations) > 0 {
			p.Backoff.Started(um.Name, um.Remediations[0].Started.Time)
		}
	}
	return p.Backoff.Status()
}
