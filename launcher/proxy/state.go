package proxy

import (
	"bytes"
	"encoding/json"
	"io"
	"sync"
	"sync/atomic"

	"github.com/mcpwarden/mcpwarden/launcher/proxy/jsonrpc"
	"github.com/mcpwarden/mcpwarden/launcher/proxy/roots"
	"github.com/mcpwarden/mcpwarden/schema"
	"github.com/mcpwarden/mcpwarden/schema/strictjson"
)

// The session's state is split into parts, each behind its own lock. A
// goroutine that needs more than one takes them in this order:
//
//	session.restartMu → scopeState.mu → upstreamState.mu → pendingTables.mu → clientState.mu
//
// Leaves, never held while another lock is taken: lifecycle.mu, issuedTokens.mu,
// notifier.mu, the jsonrpc.Writer locks, the recorder's lock. No lock of
// the parts is held while writing to the client or the server, or while
// waiting: the admission gate (gate.go) decides and registers a request
// under scopeState.mu and upstreamState.mu, then writes after releasing
// them. The upstream reader takes none of scopeState.mu: it reads the
// effective scope through scopeState.view.

// scopeState is what the current call may touch: the effective scope
// (scope ∩ client roots) and the client's roots refresh generations.
type scopeState struct {
	mu        sync.Mutex
	tracker   roots.Tracker
	effective []schema.CanonicalPath
	paths     []string // effective as plain paths, for the policy
	gen       uint64   // bumped whenever effective changes; starts at 1 (0 means "check again")
	// clientNamedRoots: an accepted roots answer of the client named at
	// least one root; from then on an empty answer revokes every path.
	clientNamedRoots bool
	// modernApplied is the newest roots round of a modern server whose
	// answer (in a retry's inputResponses) is in effect (mrtr.go).
	modernApplied uint64
	// view is effective as one immutable value, for readers that must not
	// take mu (the upstream reader answers roots/list and filters lists
	// with it while a forward may be waiting on the server's stdin).
	view atomic.Pointer[scopeView]
}

// scopeView is one generation of the effective scope.
type scopeView struct {
	gen       uint64
	effective []schema.CanonicalPath
	paths     []string
	rootsList json.RawMessage // the roots/list result the server gets
}

func (sc *scopeState) publishLocked() {
	sc.view.Store(&scopeView{gen: sc.gen, effective: sc.effective, paths: sc.paths, rootsList: roots.ListResult(sc.effective)})
}

// current is the newest published effective scope (lock-free).
func (sc *scopeState) current() *scopeView { return sc.view.Load() }

// upstreamState is the server process the proxy talks to and what its
// handshake established.
type upstreamState struct {
	mu        sync.Mutex
	w         *jsonrpc.Writer
	stdin     io.Writer
	gen       uint64 // server process generation (0 = the first process)
	era       string
	ready     bool // initialised and, for a roots server, its roots applied
	restart   bool // a narrowing restart is pending or running
	initState int  // 0 not started, 1 running, 2 done
	initErr   error
	// initParams are the legacy initialize params sent upstream, replayed
	// on every restart.
	initParams map[string]json.RawMessage
	info       map[string]json.RawMessage // initialize result (legacy) or discover result (modern)
	serverName string                     // serverInfo name@version, for records
	askedRoots chan struct{}              // closed when the current process asks roots/list
	rootsUser  bool                       // the server asks for roots (seen once)
	rootsKnown bool                       // whether the server asks for roots is known
	fence      []schema.CanonicalPath     // the paths the running process was started with
}

// upCall is a request the proxy sent to the server.
type upCall struct {
	gen      uint64
	internal chan *jsonrpc.Message // the proxy's own request: the answer goes here
	req      *request              // a client's request
}

// cliCall is a request the proxy sent to the client.
type cliCall struct {
	rootsGen    uint64                // roots/list of this generation
	answer      chan *jsonrpc.Message // elicitation for an approval
	relayID     json.RawMessage       // a server request relayed to the client: the server's id
	relayGen    uint64
	relayMethod string // and its method
}

// pendingTables are the requests in flight in both directions, and the
// client requests waiting for an approval (which a cancellation withdraws).
type pendingTables struct {
	mu       sync.Mutex
	up       map[int64]*upCall
	cli      map[int64]*cliCall
	awaiting map[string]chan struct{} // client id (idKey) → closed when the client cancels
	live     map[string]liveID        // client ids (idKey) in flight (ids.go)
	rounds   map[string]*mrtrCall     // requestState → translated call waiting for the client's retry
	// tasks: the progress tokens of calls run as tasks (2025-11-25),
	// which stay valid after the call's answer until the task ends.
	tasks map[string]taskToken
	// rootsAsk is the id of the newest roots/list sent to the client.
	rootsAsk int64
}

// taskToken is a task's progress token: of process generation gen, for
// the task the server named taskID.
type taskToken struct {
	gen    uint64
	taskID string
}

// maxTaskTokens bounds the tasks whose progress is passed at once.
const maxTaskTokens = 256

// noteTask keeps the progress token of a call the server runs as a task
// (its answer is a CreateTaskResult): the server may report progress
// with it until the task ends.
func (pt *pendingTables) noteTask(gen uint64, rq *request, m *jsonrpc.Message) {
	if rq.method != "tools/call" || m.Error != nil {
		return
	}
	v1 := rq.param("task") != nil
	if !v1 && (rq.era != eraModern || !bytes.Contains(m.Result, []byte("task"))) {
		// (2026-07-28: the call carries no "task" member; the server
		// answers with resultType "task". An escaped spelling only costs
		// the task its progress.)
		return
	}
	tok, ok := rq.meta("progressToken")
	if !ok {
		return
	}
	var r struct {
		Task struct {
			TaskID string `json:"taskId"`
		} `json:"task"`
		ResultType string `json:"resultType"`
		TaskID     string `json:"taskId"`
	}
	if strictjson.Unmarshal(m.Result, &r, strictjson.AllowUnknownMembers()) != nil {
		return
	}
	if !v1 {
		if r.ResultType != "task" {
			return
		}
		r.Task.TaskID = r.TaskID
	}
	if r.Task.TaskID == "" {
		return
	}
	pt.mu.Lock()
	defer pt.mu.Unlock()
	if len(pt.tasks) >= maxTaskTokens {
		for k, t := range pt.tasks {
			if t.gen != gen { // tasks of a process that is gone
				delete(pt.tasks, k)
			}
		}
	}
	if len(pt.tasks) < maxTaskTokens {
		pt.tasks[string(bytes.TrimSpace(tok))] = taskToken{gen: gen, taskID: r.Task.TaskID}
	}
}

// endTask forgets the progress token of a task that ended (a status
// notification naming a terminal status).
func (pt *pendingTables) endTask(m *jsonrpc.Message) {
	var p struct {
		TaskID string `json:"taskId"`
		Status string `json:"status"`
	}
	if strictjson.Unmarshal(m.Params, &p, strictjson.AllowUnknownMembers()) != nil {
		return
	}
	switch p.Status {
	case "completed", "failed", "cancelled":
	default:
		return
	}
	pt.mu.Lock()
	defer pt.mu.Unlock()
	for k, t := range pt.tasks {
		if t.taskID == p.TaskID {
			delete(pt.tasks, k)
		}
	}
}

// awaitCancel returns a channel that a notifications/cancelled naming the
// client id key closes, and stop, which withdraws it (if it is still this
// one's) when the wait is over.
func (pt *pendingTables) awaitCancel(key string) (cancelled <-chan struct{}, stop func()) {
	ch := make(chan struct{})
	pt.mu.Lock()
	pt.awaiting[key] = ch
	pt.mu.Unlock()
	return ch, func() {
		pt.mu.Lock()
		if pt.awaiting[key] == ch {
			delete(pt.awaiting, key)
		}
		pt.mu.Unlock()
	}
}

// listenRequest is the client's subscriptions/listen request that
// upstream id names on process generation gen, or nil.
func (pt *pendingTables) listenRequest(id int64, gen uint64) *request {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	c, ok := pt.up[id]
	if !ok || c.gen != gen || c.req == nil || c.req.method != "subscriptions/listen" {
		return nil
	}
	return c.req
}

// progressLive reports whether a server's notifications/progress names
// the progressToken of a request in flight on process generation gen (the
// token the client put in that request's _meta).
func (pt *pendingTables) progressLive(gen uint64, m *jsonrpc.Message) bool {
	var p struct {
		Token json.RawMessage `json:"progressToken"`
	}
	if strictjson.Unmarshal(m.Params, &p, strictjson.AllowUnknownMembers()) != nil || len(p.Token) == 0 {
		return false
	}
	tok := bytes.TrimSpace(p.Token)
	pt.mu.Lock()
	defer pt.mu.Unlock()
	for _, c := range pt.up {
		if c.gen != gen || c.req == nil {
			continue
		}
		if t, ok := c.req.meta("progressToken"); ok && bytes.Equal(bytes.TrimSpace(t), tok) {
			return true
		}
	}
	t, ok := pt.tasks[string(tok)]
	return ok && t.gen == gen
}

// take removes and returns the upstream call id of process generation gen.
func (pt *pendingTables) takeUp(id int64, gen uint64) (*upCall, bool) {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	c, ok := pt.up[id]
	if !ok || c.gen != gen {
		return nil, false
	}
	delete(pt.up, id)
	return c, true
}

// takeAllUp empties the upstream table, for a restart or a stop.
func (pt *pendingTables) takeAllUp() map[int64]*upCall {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	all := pt.up
	pt.up = map[int64]*upCall{}
	return all
}

func (pt *pendingTables) addCli(id int64, c *cliCall) {
	pt.mu.Lock()
	pt.cli[id] = c
	pt.mu.Unlock()
}

// addRootsAsk adds the roots/list the proxy sent the client for a new
// roots generation and forgets the one before it, unanswered or not: an
// answer to an older generation is ignored anyway, and a client that
// sends notifications/roots/list_changed without end and never answers
// would otherwise grow the table by one entry per notification.
func (pt *pendingTables) addRootsAsk(id int64, c *cliCall) {
	pt.mu.Lock()
	if pt.rootsAsk != 0 {
		delete(pt.cli, pt.rootsAsk)
	}
	pt.rootsAsk = id
	pt.cli[id] = c
	pt.mu.Unlock()
}

// maxRelayed bounds the server requests relayed to the client and not
// answered yet.
const maxRelayed = 64

// addRelay adds a relayed server request unless maxRelayed are waiting.
func (pt *pendingTables) addRelay(id int64, c *cliCall) bool {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	n := 0
	for _, x := range pt.cli {
		if x.relayID != nil {
			n++
		}
	}
	if n >= maxRelayed {
		return false
	}
	pt.cli[id] = c
	return true
}

// takeRelay removes the relayed request that process generation gen
// sent under its own id relayID (compared by value, as ids are) and
// returns the id the client knows it by.
func (pt *pendingTables) takeRelay(gen uint64, relayID json.RawMessage) (int64, bool) {
	key := idKey(relayID)
	pt.mu.Lock()
	defer pt.mu.Unlock()
	for id, c := range pt.cli {
		if c.relayID != nil && c.relayGen == gen && idKey(c.relayID) == key {
			delete(pt.cli, id)
			return id, true
		}
	}
	return 0, false
}

func (pt *pendingTables) takeCli(id int64) (*cliCall, bool) {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	c, ok := pt.cli[id]
	if ok {
		delete(pt.cli, id)
	}
	return c, ok
}

// clientState is what the client declared in its handshake.
type clientState struct {
	mu      sync.Mutex
	caps    map[string]json.RawMessage
	version string
	roots   bool // declared the roots capability
	elicit  bool
	sample  bool
	// rootsWanted: ask the client for roots once it is initialized.
	rootsWanted bool
	gone        bool // the client's stdin ended
}

func (cs *clientState) declared() (roots, elicit, sample bool) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.roots, cs.elicit, cs.sample
}

// lifecycle is whether and why the session stopped.
type lifecycle struct {
	mu      sync.Mutex
	stopped bool
	err     error
	done    chan struct{} // closed by stop
}

// notifier wakes every goroutine waiting for a change of readiness (the
// upstream becoming ready, a roots answer, a restart finishing, a stop).
// A waiter takes the channel before it checks the state, so it cannot miss
// a change made after its check.
type notifier struct {
	mu sync.Mutex
	ch chan struct{}
}

func (n *notifier) wait() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch == nil {
		n.ch = make(chan struct{})
	}
	return n.ch
}

func (n *notifier) broadcast() {
	n.mu.Lock()
	if n.ch != nil {
		close(n.ch)
		n.ch = nil
	}
	n.mu.Unlock()
}
