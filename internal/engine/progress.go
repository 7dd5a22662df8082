package engine

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/metalheal/metalheal/api/v1alpha1"
)

// Records are a status entry's records (v1alpha1.RemediationProgress) as the engine keeps them. A field
// an older status did not keep stays empty and matches anything (Record.Describes).
func Records(list []v1alpha1.RequestRecord) []Record {
	out := make([]Record, 0, len(list))
	for _, r := range list {
		rec := Record{APIVersion: r.APIVersion, Kind: r.Kind, Namespace: r.Namespace, Name: r.Name,
			TemplateName: r.TemplateName, Started: r.Started.Time}
		if r.TimedOut != nil {
			rec.Ended = r.TimedOut.Time
		}
		out = append(out, rec)
	}
	return out
}

// StatusRecords are the engine's records as a status entry keeps them.
func StatusRecords(list []Record) []v1alpha1.RequestRecord {
	if len(list) == 0 {
		return nil
	}
	out := make([]v1alpha1.RequestRecord, 0, len(list))
	for _, r := range list {
		rec := v1alpha1.RequestRecord{APIVersion: r.APIVersion, Kind: r.Kind, Namespace: r.Namespace, Name: r.Name,
			TemplateName: r.TemplateName, Started: metav1.NewTime(r.Started)}
		if !r.Ended.IsZero() {
			rec.TimedOut = &metav1.Time{Time: r.Ended}
		}
		out = append(out, rec)
	}
	return out
}

// Adopted are a status entry's records completed with the requests that exist but are not recorded
// (Adopt), as the entry keeps them.
func Adopted(entry v1alpha1.RemediationProgress, requests []Request, now time.Time) []v1alpha1.RequestRecord {
	return StatusRecords(Adopt(Records(entry.Remediations), requests, now))
}

// Sent records in the outcome's entry what came of the request it asked for (Executor.Report): the request
// made or adopted (a step started again keeps its record), or the skip that stopped it (a lease or a
// request someone else made a moment before), whose event it returns once per reason and message, as
// Admit's (Skip.Event). A request that could not be sent leaves no record: the next pass tries again.
func (o *Outcome) Sent(res Sent, template string) *Event {
	switch {
	case res.Skip != nil:
		o.Skip, o.Entry.SkipReason, o.Entry.SkipMessage = res.Skip, res.Skip.Reason, res.Skip.Message
		return res.Skip.Event(o.Target.Status.SkipReason, o.Target.Status.SkipMessage, o.Target.Subject, o.Target.Why)
	case res.Err != nil:
		return nil
	}
	o.Entry.SkipReason, o.Entry.SkipMessage = "", ""
	if !o.Create.Again {
		o.Entry.Remediations = append(o.Entry.Remediations, v1alpha1.RequestRecord{APIVersion: res.Ref.APIVersion,
			Kind: res.Ref.Kind, Namespace: res.Ref.Namespace, Name: res.Ref.Name, TemplateName: template,
			Started: metav1.NewTime(res.At)})
	}
	return nil
}
