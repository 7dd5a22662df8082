package redfishmock_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/metalheal/metalheal/test/redfish-mock/redfishmock"
)

// A reset whose answer is lost is carried out all the same: the client sees a timeout or a transport
// error, the system's power moves, and Resets records it. Only the next n answers go missing.
func TestLoseResetAnswers(t *testing.T) {
	for name, tc := range map[string]struct {
		how     redfishmock.LostAnswer
		wantErr func(error) bool
	}{
		"withheld: the client times out": {how: redfishmock.AnswerWithheld,
			wantErr: func(err error) bool { return errors.Is(err, context.DeadlineExceeded) }},
		"dropped: the connection closes unanswered": {how: redfishmock.AnswerDropped,
			wantErr: func(err error) bool { return err != nil && !errors.Is(err, context.DeadlineExceeded) }},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			m := start(t, redfishmock.New().WithSystems(2).WithClock(fakeClock()).WithPowerDelay(10*time.Second))
			g.Expect(m.LoseResetAnswers("1", 1, tc.how)).To(Succeed())

			post := func(resetType string) (int, error) {
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				defer cancel()
				r, err := http.NewRequestWithContext(ctx, http.MethodPost, m.URL()+resetPath, strings.NewReader(resetBody(resetType)))
				g.Expect(err).NotTo(HaveOccurred())
				r.SetBasicAuth("admin", "password")
				resp, err := http.DefaultClient.Do(r)
				if err != nil {
					return 0, err
				}
				resp.Body.Close()
				return resp.StatusCode, nil
			}
			_, err := post("ForceOff")
			g.Expect(tc.wantErr(err)).To(BeTrue(), "error %v", err)
			g.Expect(m.PowerState("1")).To(Equal(redfishmock.PoweringOff), "the reset was carried out")
			g.Expect(m.Resets("1")).To(Equal([]string{"ForceOff"}))

			status, err := post("On")
			g.Expect(err).NotTo(HaveOccurred(), "only the next answer goes missing")
			g.Expect(status).To(Equal(http.StatusNoContent))
			g.Expect(m.Resets("1")).To(Equal([]string{"ForceOff", "On"}))
			g.Expect(m.LoseResetAnswers("9", 1, tc.how)).To(MatchError(redfishmock.ErrNoSuchSystem))
			g.Expect(m.LoseResetAnswers("1", 1, 0)).NotTo(Succeed(), "a lost answer must say how it is lost")

			g.Expect(m.LoseResetAnswers("1", 2, tc.how)).To(Succeed())
			m.ClearFaults()
			status, err = post("ForceOff")
			g.Expect(err).NotTo(HaveOccurred(), "ClearFaults stops it")
			g.Expect(status).To(Equal(http.StatusNoContent))
		})
	}
}
