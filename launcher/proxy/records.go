package proxy

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/mcpwarden/mcpwarden/launcher"
	"github.com/mcpwarden/mcpwarden/schema"
)

// recorder writes decision records off the call path, in batches, so a
// durable audit log (fsync per batch) does not add its latency to every
// call. A batch is written FlushDelay after its first record was queued
// (or at once when the queue is full or the run stops): one wake-up, one
// write and one fsync per batch instead of per call. A failed write is
// sticky: from then on every call is denied and the run stops (fail
// closed); records already queued are still attempted.
type recorder struct {
	s *session

	mu   sync.Mutex
	cond *sync.Cond
	// queue holds the records of the next batch as the readers gave them;
	// the writer completes them (an op id a record was not given on the
	// path, its paths' keyed hashes) and makes them events (ids, envelope)
	// off the call path. A batch's records are never reused: a sink may
	// keep a record it took.
	queue []queued
	due   bool // the queued batch's delay ran out
	// timer is the batch's delay. The writer waits on its channel itself,
	// so its firing makes the writer runnable and nothing else (a timer
	// that ran a function started a goroutine per batch, which then woke
	// the writer).
	timer *time.Timer
	// kick wakes the writer at once (a full queue, no delay, the run
	// stopping); it holds one wake-up.
	kick    chan struct{}
	closing bool
	done    chan struct{}
	werr    error
}

// queued is a record as a reader hands it to the writer: paths are the
// resolved paths the call was checked against, in order, which the writer
// hashes into the record's path_hashes after any it already holds (they
// stay in memory only: nothing but their keyed hashes is written).
type queued struct {
	d     schema.Decision
	paths []string
}

// maxQueued bounds the queue; add blocks beyond it (back-pressure on calls
// rather than losing records).
const maxQueued = 4096

// maxKeptBatch bounds the event slice the writer keeps for the next batch
// and the queue it starts the next batch with.
const maxKeptBatch = 256

// DefaultFlushDelay is how long a decision record may wait to be batched
// with the next ones before it is written (and fsync'd).
const DefaultFlushDelay = 10 * time.Millisecond

func newRecorder(s *session) *recorder {
	r := &recorder{s: s, done: make(chan struct{}), kick: make(chan struct{}, 1), timer: time.NewTimer(time.Hour)}
	r.timer.Stop()
	r.cond = sync.NewCond(&r.mu)
	return r
}

// add queues d. It runs on a reader, after the answer was written: the
// record is copied into the queue and nothing else is done here (no id,
// no hash, no envelope, no allocation but the queue's growth).
func (r *recorder) add(d schema.Decision) { r.addPaths(d, nil) }

// addPaths queues d with the paths its call was checked against; the
// writer hashes them (see queued).
func (r *recorder) addPaths(d schema.Decision, paths []string) {
	select {
	case <-r.done: // the writer has finished: a straggler is written directly
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		late := queued{d, paths} // (a copy: taking d's address would move every call's d to the heap)
		if err := r.s.cfg.Sink.Publish(ctx, []schema.Event{r.event(&late)}); err != nil {
			r.s.log.Error("decision record lost after the run ended", "err", err.Error())
		}
		return
	default:
	}
	r.mu.Lock()
	for len(r.queue) >= maxQueued && !r.closing && r.werr == nil {
		r.cond.Wait()
	}
	r.queue = append(r.queue, queued{d, paths})
	switch delay := r.s.cfg.FlushDelay; {
	case len(r.queue) >= maxQueued, len(r.queue) == 1 && delay <= 0:
		r.wake()
	case len(r.queue) == 1:
		// The batch's first record starts its delay. The timer wakes the
		// writer when it runs out: a caller that woke the writer itself
		// would leave it queued on its own processor, which the caller's
		// next blocking read then holds (see blockingFile), until the
		// scheduler's monitor hands it off. Later records of the batch
		// wake nobody. (A firing left over from a batch taken early is
		// dropped by Reset.)
		r.due = false
		r.timer.Reset(delay)
	}
	r.mu.Unlock()
}

// wake wakes the writer unless a wake-up is pending already.
func (r *recorder) wake() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// event completes q's record and makes its event, pointing at it: an op id
// when the path never needed one (no denial, no approval named it), and
// the keyed hashes of its paths.
func (r *recorder) event(q *queued) schema.Event {
	cfg := r.s.cfg
	d := &q.d
	if d.OpID == "" {
		d.OpID = schema.NewID()
	}
	for _, p := range q.paths {
		d.PathHashes = append(d.PathHashes, cfg.Hasher.Hash(p))
	}
	q.paths = nil
	ev := cfg.Origin.NewEvent(schema.KindDecision, cfg.RunID, cfg.Scope.ScopeID, cfg.Scope.Hash, time.Unix(0, d.StartNS))
	ev.Decision = d
	return ev
}

func (r *recorder) run() {
	defer close(r.done)
	delay := r.s.cfg.FlushDelay
	// The events of a batch go on in the previous batch's slice (the sink
	// keeps nothing of the slice it took): one grown from nil for every
	// batch cost more allocation than the records.
	var batch []schema.Event
	for {
		r.mu.Lock()
		// A batch goes when its delay ran out, the queue is full or the
		// run stops.
		for !r.closing && (len(r.queue) == 0 || delay > 0 && !r.due && len(r.queue) < maxQueued) {
			r.mu.Unlock()
			select {
			case <-r.timer.C:
				r.mu.Lock()
				r.due = true
			case <-r.kick:
				r.mu.Lock()
			}
		}
		if len(r.queue) == 0 && r.closing {
			r.mu.Unlock()
			return
		}
		r.due = false
		records := r.queue
		r.queue = make([]queued, 0, min(len(records), maxKeptBatch))
		last := r.closing
		r.cond.Broadcast()
		r.mu.Unlock()

		batch = batch[:0]
		for i := range records {
			batch = append(batch, r.event(&records[i]))
		}

		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var err error
		if d, ok := r.s.cfg.Sink.(launcher.DeferSyncSink); ok && last {
			// The session has ended: the launcher's exit record follows
			// in the same log, and its sync makes these durable too.
			err = d.PublishDeferSync(ctx, batch)
		} else {
			err = r.s.cfg.Sink.Publish(ctx, batch)
		}
		cancel()
		if cap(batch) <= maxKeptBatch {
			clear(batch) // the sink keeps nothing of a batch it took
		} else {
			batch = nil
		}
		if err != nil {
			r.mu.Lock()
			if r.werr == nil {
				r.werr = fmt.Errorf("%w: %w", ErrAuditSink, err)
			}
			r.cond.Broadcast()
			r.mu.Unlock()
			r.s.stop(ErrAuditSink)
		}
	}
}

// close flushes what is queued and stops the writer.
func (r *recorder) close() {
	r.mu.Lock()
	r.closing = true
	r.timer.Stop()
	r.cond.Broadcast() // an add waiting for room
	r.mu.Unlock()
	r.wake()
	<-r.done
}

func (r *recorder) failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.werr != nil
}

func (r *recorder) err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.werr
}

// serverOrigin is what a record names the server by: the name it gave in
// its handshake, else the configured origin.
func (s *session) serverOrigin() string {
	s.upst.mu.Lock()
	origin := s.upst.serverName
	s.upst.mu.Unlock()
	if origin == "" {
		return s.cfg.ServerOrigin
	}
	return origin
}

// recordProtocolDenial records a message refused before it had a tool: a
// malformed frame, an unsupported version, a method the table does not pass.
func (s *session) recordProtocolDenial(method, era, version string, code schema.ErrorCode) {
	s.rec.add(s.protocolDenial(method, era, version, code))
}

func (s *session) protocolDenial(method, era, version string, code schema.ErrorCode) schema.Decision {
	now := s.cfg.Now()
	return schema.Decision{
		OpID: schema.NewID(), Method: recordLabel(truncate(method, 64)), ProtocolEra: era, ProtocolVersion: recordLabel(version),
		ServerOrigin: s.serverOrigin(), ActionClass: schema.ActionNone, Decision: schema.OutcomeDeny, Approval: schema.ApprovalNotRequired,
		ErrorCode: string(code), StartNS: now.UnixNano(), EndNS: now.UnixNano(),
	}
}
