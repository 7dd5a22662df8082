package gates

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestAdmission(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	held := map[string]Lease{"w-held": {Holder: "node-maintenance", Until: now.Add(time.Minute)},
		"cp-held": {Holder: "node-maintenance", Until: now.Add(time.Minute)},
		"w-ours":  {Holder: "me", Until: now.Add(time.Minute)}}
	type offer struct{ cpKey, node, wantReason string }
	for _, tc := range []struct {
		name   string
		busy   []string
		offers []offer
	}{
		{name: "workers pass; one whose lease someone else holds does not", offers: []offer{
			{node: "w-1"}, {node: "w-ours"}, {node: "w-held", wantReason: SkipLeaseHeldByOther}}},
		{name: "control plane: the first admitted makes the second wait", offers: []offer{
			{cpKey: "cp-1", node: "cp-1"}, {cpKey: "cp-2", node: "cp-2", wantReason: SkipControlPlaneBusy}, {node: "w-1"}}},
		{name: "control plane: one busy elsewhere holds every other back, not itself", busy: []string{"cp-1"}, offers: []offer{
			{cpKey: "cp-2", node: "cp-2", wantReason: SkipControlPlaneBusy}, {cpKey: "cp-1", node: "cp-1"}}},
		{name: "a control-plane target whose lease is held is not admitted and holds no one back", offers: []offer{
			{cpKey: "cp-held", node: "cp-held", wantReason: SkipLeaseHeldByOther}, {cpKey: "cp-2", node: "cp-2"}}},
		{name: "a Machine without a Node: only the one-at-a-time rule", offers: []offer{
			{cpKey: "Machine ns/m"}, {cpKey: "cp-2", node: "cp-2", wantReason: SkipControlPlaneBusy}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			a := NewAdmission("me", held, tc.busy, now)
			for _, o := range tc.offers {
				reason, msg, retry := a.Admit(o.cpKey, o.node)
				g.Expect(reason).To(Equal(o.wantReason), "%+v", o)
				g.Expect(msg == "").To(Equal(o.wantReason == ""))
				if o.wantReason == SkipLeaseHeldByOther {
					g.Expect(retry).To(Equal(now.Add(time.Minute+time.Second)), "looked at again a second after the lease runs out")
				}
			}
		})
	}
}
