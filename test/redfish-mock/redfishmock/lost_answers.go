package redfishmock

import (
	"fmt"
	"net/http"
	"sync"
	"time"
)

// LostAnswer is how the answer to a reset the mock carried out goes missing.
type LostAnswer int

const (
	// AnswerWithheld keeps the request waiting, unanswered, until the client gives up: to the client, a
	// timeout.
	AnswerWithheld LostAnswer = iota + 1
	// AnswerDropped closes the connection instead of answering: to the client, a transport error.
	AnswerDropped
)

// lostAnswers are the resets, per system, whose answer is to go missing after they are carried out.
type lostAnswers struct {
	mu   sync.Mutex
	next map[string]lostAnswer
}

type lostAnswer struct {
	left int
	how  LostAnswer
}

// LoseResetAnswers makes the next n resets of system id that the system accepts be carried out as
// usual (the power changes, Resets records them) and then go unanswered, as how says: the ambiguous answer
// of a real BMC that took a request and timed out, or lost the connection, before saying so. n = 0 stops
// it. ClearFaults stops it too.
func (m *Mock) LoseResetAnswers(id string, n int, how LostAnswer) error {
	if n < 0 || (n > 0 && how != AnswerWithheld && how != AnswerDropped) {
		return fmt.Errorf("LoseResetAnswers: want n ≥ 0 and AnswerWithheld or AnswerDropped, got %d, %d", n, how)
	}
	if err := m.withSystem(id, func(*system, time.Time, *effects) {}); err != nil {
		return err
	}
	m.lost.mu.Lock()
	defer m.lost.mu.Unlock()
	if m.lost.next == nil {
		m.lost.next = map[string]lostAnswer{}
	}
	if n == 0 {
		delete(m.lost.next, id)
	} else {
		m.lost.next[id] = lostAnswer{left: n, how: how}
	}
	return nil
}

// clear forgets every lost answer still to come.
func (l *lostAnswers) clear() {
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.next)
}

// take counts down one lost answer of system id and reports how it goes missing (0: it does not).
func (l *lostAnswers) take(id string) LostAnswer {
	l.mu.Lock()
	defer l.mu.Unlock()
	a, ok := l.next[id]
	if !ok {
		return 0
	}
	if a.left--; a.left == 0 {
		delete(l.next, id)
	} else {
		l.next[id] = a
	}
	return a.how
}

// loseAnswer is called once a reset of system id was carried out: it withholds or drops the answer when
// one is due to go missing, and reports whether it did.
func (m *Mock) loseAnswer(w http.ResponseWriter, r *http.Request, id string) bool {
	switch m.lost.take(id) {
	case AnswerWithheld:
		<-r.Context().Done() // the client gave up, or the mock closed
		return true
	case AnswerDropped:
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close()
			return true
		}
		// Cannot hijack (HTTP/2): the nearest thing is an error.
		writeError(w, http.StatusBadGateway, "Base.1.8.GeneralError", "answer dropped by injected fault")
		return true
	}
	return false
}
