package powercycle

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/metalheal/metalheal/api/v1alpha1"
)

// sentRequests remembers when this process's power requests went out. A request is recorded before it
// is sent, to the second, and under load the write that records it takes a second or more: counting the
// first poll from the record reads the BMC before the host had its poll interval to change, and the
// reading that fails costs a whole interval more. Counting from the send, the first poll is the one that
// finds the change done. A new process remembers nothing, and counts from the record, as it must.
type sentRequests struct {
	mu   sync.Mutex
	sent map[types.NamespacedName]sentRequest
}

// sentRequest is one request that went out: the request as recorded (a later one of the same target is
// another request), and when the BMC accepted it.
type sentRequest struct {
	request v1alpha1.PowerRequest
	at      time.Time
}

// record remembers that req, as recorded in the remediation's status, went out at at.
func (r *sentRequests) record(key types.NamespacedName, req v1alpha1.PowerRequest, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sent == nil {
		r.sent = map[types.NamespacedName]sentRequest{}
	}
	r.sent[key] = sentRequest{request: req, at: at}
}

// sentAt returns when req went out, if this process sent it.
func (r *sentRequests) sentAt(key types.NamespacedName, req v1alpha1.PowerRequest) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.sent[key]
	if !ok || s.request.Target != req.Target || !s.request.Time.Equal(&req.Time) {
		return time.Time{}, false
	}
	return s.at, true
}

// forget drops what is remembered of a remediation that is gone.
func (r *sentRequests) forget(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.sent, key)
}
