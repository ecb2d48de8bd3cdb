package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mcpwarden/mcpwarden/launcher/proxy/jsonrpc"
	"github.com/mcpwarden/mcpwarden/launcher/proxy/policy"
	"github.com/mcpwarden/mcpwarden/launcher/proxy/roots"
	"github.com/mcpwarden/mcpwarden/schema"
	"github.com/mcpwarden/mcpwarden/schema/strictjson"
)

// ensureUpstream initialises the upstream once per session (and the
// handshake is replayed after each restart). The upstream's era follows the
// era of the client's first request (clientEra): a legacy client gets a
// legacy upstream (initialize, never a server/discover probe: a server that
// saw a modern request may refuse a later initialize, and legacy-only
// methods such as logging/setLevel or resources/subscribe would be lost); a
// modern client gets a modern upstream where the server has one (probed
// with server/discover), else a legacy one it is translated to. legacyInit
// is the client's initialize params when a legacy client started the session.
func (s *session) ensureUpstream(clientEra string, legacyInit map[string]json.RawMessage, modernMeta []jsonrpc.Member) error {
	for {
		ch := s.changed.wait()
		s.upst.mu.Lock()
		switch s.upst.initState {
		case 2:
			err := s.upst.initErr
			s.upst.mu.Unlock()
			return err
		case 1:
			s.upst.mu.Unlock()
			select {
			case <-ch:
			case <-s.life.done:
				return errNotReady
			}
			continue
		}
		s.upst.initState = 1
		var meta map[string]json.RawMessage
		if legacyInit == nil {
			meta = membersMap(modernMeta)
		}
		s.upst.initParams = s.checkedInitParams(upstreamInitParams(legacyInit, meta))
		s.upst.mu.Unlock()
		break
	}

	era, info, err := eraLegacy, map[string]json.RawMessage(nil), error(nil)
	if clientEra == eraModern {
		era, info, err = s.probe()
	}
	if err == nil {
		s.upst.mu.Lock()
		s.upst.era = era
		if era == eraModern {
			s.upst.info = info
			s.upst.serverName = serverName(info)
		}
		s.upst.mu.Unlock()
		s.log.Info("upstream era probed", "era", era)
		err = s.handshake(true)
		if errors.Is(err, errInitializeRefused) && clientEra == eraLegacy {
			err = s.modernOnly(err)
		}
	}
	if err == nil && s.cfg.OnServerInfo != nil {
		s.upst.mu.Lock()
		name, version := serverIdentity(s.upst.info)
		era := s.upst.era
		s.upst.mu.Unlock()
		s.cfg.OnServerInfo(name, version, era)
	}
	s.upst.mu.Lock()
	s.upst.initState = 2
	s.upst.initErr = err
	s.upst.mu.Unlock()
	s.changed.broadcast()
	if err != nil {
		s.stop(errors.Join(ErrUpstream, err))
	}
	return err
}

// probe asks server/discover; a DiscoverResult supporting ModernVersion
// means modern, a modern error refusing our version means the server cannot
// be spoken to without mixing eras, anything else (or silence) means legacy.
func (s *session) probe() (string, map[string]json.RawMessage, error) {
	s.upst.mu.Lock()
	caps := s.upst.initParams["capabilities"]
	info := s.upst.initParams["clientInfo"]
	s.upst.mu.Unlock()
	params := map[string]any{"_meta": map[string]any{
		metaVersion:    ModernVersion,
		metaClientCaps: withoutRoots(caps),
		metaClientInfo: info,
	}}
	m := s.internalCall("server/discover", params, s.cfg.ProbeTimeout)
	switch {
	case m == nil:
		return eraLegacy, nil, nil
	case m.Error == nil:
		var res map[string]json.RawMessage
		if strictjson.Unmarshal(m.Result, &res) == nil {
			var versions []string
			_ = strictjson.Unmarshal(res["supportedVersions"], &versions)
			if slices.Contains(versions, ModernVersion) {
				return eraModern, res, nil
			}
		}
		return eraLegacy, nil, nil
	case m.Error.Code == jsonrpc.CodeUnsupportedVersion:
		var data struct {
			Supported []string `json:"supported"`
		}
		if m.Error.Data != nil {
			_ = strictjson.Unmarshal(m.Error.Data, &data, strictjson.AllowUnknownMembers())
		}
		if slices.Contains(data.Supported, ModernVersion) {
			return eraModern, nil, nil
		}
		return "", nil, fmt.Errorf("the server speaks only protocol versions %v; mcpwarden speaks %s and the legacy versions, and never mixes eras on one process", data.Supported, ModernVersion)
	}
	return eraLegacy, nil, nil
}

// handshake initialises a legacy upstream (initialize, initialized) and,
// for a server that takes its directories from roots, waits until it has
// applied them — in the background when async, so the client's initialize
// is answered at once while calls wait for readiness. Modern upstreams need
// no handshake.
func (s *session) handshake(async bool) error {
	s.upst.mu.Lock()
	era := s.upst.era
	params := s.upst.initParams
	asked := s.upst.askedRoots
	// Wait for roots when the server asks for them, or when that is not
	// known yet (a restart may come before the first process ever asked).
	waitRoots := s.upst.rootsUser || !s.upst.rootsKnown
	firstTime := s.upst.info == nil
	gen := s.upst.gen
	s.upst.mu.Unlock()
	if era == eraLegacy {
		m := s.internalCall("initialize", params, initTimeout)
		if m == nil {
			return fmt.Errorf("the server did not answer initialize within %v (or its process ended first)", initTimeout)
		}
		if m.Error != nil {
			err := fmt.Errorf("the server refused initialize: %d %s", m.Error.Code, truncate(m.Error.Message, 128))
			if m.Error.Code == jsonrpc.CodeMethodNotFound || m.Error.Code == jsonrpc.CodeUnsupportedVersion {
				// What a server of the 2026-07-28 era only answers.
				err = fmt.Errorf("%w (%w)", errInitializeRefused, err)
			}
			return err
		}
		var res map[string]json.RawMessage
		if err := strictjson.Unmarshal(m.Result, &res); err != nil || res == nil {
			return errors.New("the server's initialize result is not an object")
		}
		s.upst.mu.Lock()
		if firstTime {
			s.upst.info = res
			s.upst.serverName = serverName(res)
		}
		w := s.upst.w
		s.upst.mu.Unlock()
		s.toServer(w, jsonrpc.Request(nil, "notifications/initialized", nil))
		ready := func() {
			s.warmup(asked, waitRoots)
			s.markReady(gen)
		}
		if async {
			go ready()
		} else {
			ready()
		}
		return nil
	}
	s.markReady(gen)
	return nil
}

// errInitializeRefused: the server answered initialize as one that speaks
// only the 2026-07-28 era does (-32601 or -32022).
var errInitializeRefused = errors.New("the server refused initialize as a server of the 2026-07-28 era does")

// modernOnly serves a legacy client with a server that refused its
// initialize as a modern-only server would (cause): the process that saw
// initialize is replaced by a fresh one (eras are never mixed on one
// process), which is probed with server/discover. If it speaks
// 2026-07-28, the upstream is modern and the legacy client's requests are
// translated (as for a session whose first request was modern); the era
// is cached and replayed on every later restart. Otherwise the run fails
// with both answers.
func (s *session) modernOnly(cause error) error {
	s.log.Info("the server refused initialize: probing a fresh process as 2026-07-28")
	if err := s.replaceProcess(); err != nil {
		return errors.Join(cause, err)
	}
	era, info, err := s.probe()
	if err != nil {
		return errors.Join(cause, err)
	}
	if era != eraModern {
		return fmt.Errorf("%w, and it does not answer server/discover as a %s server either; mcpwarden cannot speak to it", cause, ModernVersion)
	}
	s.upst.mu.Lock()
	s.upst.era = eraModern
	s.upst.info = info
	s.upst.serverName = serverName(info)
	s.upst.mu.Unlock()
	s.log.Info("upstream era probed", "era", eraModern, "client_era", eraLegacy)
	return s.handshake(true)
}

// replaceProcess replaces the server process by a fresh one under the
// same fence, before any request of the client reached it (the first
// handshake): its internal requests are abandoned.
func (s *session) replaceProcess() error {
	s.restartMu.Lock()
	defer s.restartMu.Unlock()
	s.upst.mu.Lock()
	s.upst.restart = true // the old process's EOF does not end the run
	s.upst.ready = false
	s.upst.gen++
	gen := s.upst.gen
	fence := slices.Clone(s.upst.fence)
	s.upst.askedRoots = make(chan struct{})
	s.upst.mu.Unlock()
	for _, c := range s.pend.takeAllUp() {
		if c.internal != nil {
			c.internal <- nil
		} else if c.req != nil {
			s.finish(c.req, errorFrame(c.req.id, jsonrpc.CodeInternalError, "the server was restarted; the call was not retried"), "")
		}
	}
	if err := s.up.Restart(s.ctx, fence); err != nil {
		return err
	}
	s.upst.mu.Lock()
	s.upst.stdin = s.up.Stdin()
	s.upst.w = jsonrpc.NewWriter(rawWriter(s.upst.stdin))
	w := s.upst.w
	s.upst.restart = false
	s.upst.mu.Unlock()
	go s.readUpstream(gen, s.up.Stdout(), w)
	return nil
}

// markReady lets calls through to server process generation gen, unless a
// restart has replaced it meanwhile.
func (s *session) markReady(gen uint64) {
	s.scope.mu.Lock()
	s.upst.mu.Lock()
	if gen != s.upst.gen {
		s.upst.mu.Unlock()
		s.scope.mu.Unlock()
		return
	}
	s.upst.ready = true
	if roots.Equal(s.scope.effective, s.upst.fence) {
		s.upst.restart = false
	}
	s.upst.mu.Unlock()
	s.scope.mu.Unlock()
	s.changed.broadcast()
}

// warmup waits (bounded) for a roots server to ask roots/list and to apply
// the answer. The protocol has no acknowledgement for roots (spec issue
// #1410), so the proxy polls list_allowed_directories where the server has
// it; a call forwarded earlier would run against the server's old list.
func (s *session) warmup(asked chan struct{}, wait bool) {
	if !wait {
		return
	}
	deadline := time.Now().Add(s.cfg.WarmupTimeout)
	// A server known to ask for roots gets the whole warm-up to ask. For
	// one whose habits are unknown, a ping sent right after initialized
	// tells: a server handles its messages in order, and one that asks for
	// roots does so when it handles initialized, so its roots/list arrives
	// before the pong. A pong first means it does not ask (now): the first
	// request waits one round trip, not a timeout. The pong is waited for
	// as long as the roots themselves (the whole warm-up), never less: a
	// server slow to answer (a loaded machine) cannot be told from one that
	// does not ask, and a call let through before its roots/list would run
	// against the server's old list (or an empty one: refused).
	s.upst.mu.Lock()
	known := s.upst.rootsUser
	s.upst.mu.Unlock()
	var pong <-chan *jsonrpc.Message
	if !known {
		var done func()
		pong, done = s.internalStart("ping", nil)
		defer done()
	}
	t := time.NewTimer(s.cfg.WarmupTimeout)
	defer t.Stop()
	doesNotAsk := func() {
		s.upst.mu.Lock()
		if asked == s.upst.askedRoots { // still the same process: it does not ask for roots
			s.upst.rootsKnown = true
		}
		s.upst.mu.Unlock()
	}
	select {
	case <-asked:
	case m := <-pong:
		select {
		case <-asked: // its roots/list came first (the reader handled it before the pong)
		default:
			if m != nil {
				doesNotAsk()
				return
			}
			// The process went away or the ping was dropped: fall back to the timeout.
			select {
			case <-asked:
			case <-t.C:
				doesNotAsk()
				return
			case <-s.life.done:
				return
			}
		}
	case <-t.C:
		doesNotAsk()
		return
	case <-s.life.done:
		return
	}
	for time.Now().Before(deadline) {
		want := s.scope.current().paths
		m := s.internalCall("tools/call", map[string]any{"name": "list_allowed_directories", "arguments": map[string]any{}}, time.Until(deadline))
		if m == nil || m.Error != nil {
			return
		}
		var res struct {
			IsError bool `json:"isError"`
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		}
		if strictjson.Unmarshal(m.Result, &res, strictjson.AllowUnknownMembers()) != nil || res.IsError || len(res.Content) == 0 {
			return
		}
		lines := strings.Split(res.Content[0].Text, "\n")
		if len(want) == 0 || containsAll(lines, want) {
			return
		}
		select {
		case <-time.After(5 * time.Millisecond):
		case <-s.life.done:
			return
		}
	}
}

func containsAll(lines, want []string) bool {
	for _, w := range want {
		if !slices.Contains(lines, w) {
			return false
		}
	}
	return true
}

// upstreamInitParams builds the initialize params the proxy sends upstream:
// the client's own (legacy) or those derived from a modern client's _meta,
// always declaring roots with listChanged, because the proxy is the roots
// provider. Sampling and elicitation are declared only if the client did.
func upstreamInitParams(legacy, meta map[string]json.RawMessage) map[string]json.RawMessage {
	out := map[string]json.RawMessage{}
	caps := map[string]json.RawMessage{}
	info := json.RawMessage(`{"name":"mcpwarden","version":"1"}`)
	version := LegacyVersions[0]
	if legacy != nil {
		if raw, ok := legacy["capabilities"]; ok {
			_ = strictjson.Unmarshal(raw, &caps)
		}
		if legacy["clientInfo"] != nil {
			info = legacy["clientInfo"]
		}
		var v string
		if strictjson.Unmarshal(legacy["protocolVersion"], &v) == nil && slices.Contains(LegacyVersions, v) {
			version = v
		}
	} else if meta != nil {
		_ = strictjson.Unmarshal(meta[metaClientCaps], &caps)
		if meta[metaClientInfo] != nil {
			info = meta[metaClientInfo]
		}
	}
	if caps == nil {
		caps = map[string]json.RawMessage{}
	}
	kept := map[string]json.RawMessage{"roots": json.RawMessage(`{"listChanged":true}`)}
	for _, k := range []string{"sampling", "elicitation"} {
		if v, ok := caps[k]; ok {
			kept[k] = v
		}
	}
	out["protocolVersion"] = mustJSON(version)
	out["capabilities"] = mustJSON(kept)
	out["clientInfo"] = info
	return out
}

// checkedInitParams holds the client's clientInfo and the capabilities
// kept from its initialize (or a modern first request's _meta) to the
// rule of a request's other members (round twelve: before, they reached
// the server in the proxy's own initialize and discover probe unread, as
// the proxy serves initialize itself): a clientInfo that names a path the
// effective scope does not allow is replaced by the proxy's own, a kept
// capability's value that does by {} (the declaration stays).
func (s *session) checkedInitParams(p map[string]json.RawMessage) map[string]json.RawMessage {
	eff := s.scope.current().paths
	if _, d := s.pol.CheckValues(p["clientInfo"], eff); d != nil {
		s.log.Warn("the client's clientInfo names a path the scope does not allow; the server gets mcpwarden's", "error_code", string(d.Code))
		p["clientInfo"] = json.RawMessage(`{"name":"mcpwarden","version":"1"}`)
	}
	var caps map[string]json.RawMessage
	if strictjson.Unmarshal(p["capabilities"], &caps) != nil || caps == nil {
		return p
	}
	changed := false
	for k, v := range caps {
		if _, d := s.pol.CheckValues(v, eff); d != nil {
			s.log.Warn("a client capability names a path the scope does not allow; the server gets it empty", "capability", k, "error_code", string(d.Code))
			caps[k], changed = json.RawMessage(`{}`), true
		}
	}
	if changed {
		p["capabilities"] = mustJSON(caps)
	}
	return p
}

// withoutRoots drops the roots capability: client roots never reach a server.
func withoutRoots(caps json.RawMessage) map[string]json.RawMessage {
	m := map[string]json.RawMessage{}
	if len(caps) > 0 {
		_ = strictjson.Unmarshal(caps, &m)
	}
	if m == nil {
		m = map[string]json.RawMessage{}
	}
	delete(m, "roots")
	return m
}

// serverIdentity is the serverInfo name and version of an initialize or
// discover result, as the server gave them (empty when absent).
func serverIdentity(info map[string]json.RawMessage) (name, version string) {
	var si struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	}
	if strictjson.Unmarshal(serverInfoOf(info), &si, strictjson.AllowUnknownMembers()) != nil || si.Name == "" || si.Name == "unknown" && si.Version == "0" {
		return "", ""
	}
	return si.Name, si.Version
}

func serverName(info map[string]json.RawMessage) string {
	name, version := serverIdentity(info)
	if name == "" {
		return ""
	}
	if version != "" {
		name += "@" + version
	}
	// A token, as every record field must be: the server's own strings
	// may hold anything (the official everything server calls itself
	// "mcp-servers/everything"), and a record the daemon or the collector
	// refuses stops the run or is lost.
	return schema.SanitizeToken(name)
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic("proxy: encode: " + err.Error())
	}
	return b
}

// --- reading the server ------------------------------------------------------

// idPatterns find the id at the head or the tail of an oversized message;
// compiled on first use, not at every launch.
var idPatterns = sync.OnceValues(func() (head, tail *regexp.Regexp) {
	return regexp.MustCompile(`^\s*\{\s*"jsonrpc"\s*:\s*"2\.0"\s*,\s*"id"\s*:\s*(-?[0-9]+)\s*,`),
		regexp.MustCompile(`"id"\s*:\s*(-?[0-9]+)\s*\}\s*$`)
})

// readUpstream reads one server process's stdout (generation gen).
func (s *session) readUpstream(gen uint64, out io.Reader, w *jsonrpc.Writer) {
	in := takeBlocking(out)
	if c, ok := in.(io.Closer); ok && in != out {
		defer c.Close()
	}
	r := jsonrpc.NewReader(in, s.cfg.MaxMessageBytes)
	for {
		frame, err := r.Next()
		if errors.Is(err, jsonrpc.ErrFrameTooLarge) {
			s.onOversizedUpstream(gen, r.Head, r.Tail)
			continue
		}
		if err != nil {
			break
		}
		m, perr := jsonrpc.Parse(frame)
		if perr != nil {
			s.onMalformedUpstream(gen, frame, perr)
			continue
		}
		switch m.Kind {
		case jsonrpc.KindResponse:
			s.onUpstreamResponse(gen, m, len(frame))
		case jsonrpc.KindRequest:
			s.onUpstreamRequest(gen, w, m)
		case jsonrpc.KindNotification:
			s.onUpstreamNotification(gen, m)
		}
	}
	// The process's stdout ended: nothing more can come from it. Unless it
	// is being replaced (a restart moves the generation on before it stops
	// the old process), the run is over. The session ends now, not once the
	// process is reaped: its last decision records are written while the
	// launcher waits for the process tree to go.
	if s.isStopped() {
		return
	}
	s.upst.mu.Lock()
	current := gen == s.upst.gen && !s.upst.restart
	s.upst.mu.Unlock()
	if current {
		s.stop(nil)
	}
}

// onMalformedUpstream drops a server frame that is not valid JSON-RPC (a
// response with both result and error, a lone surrogate, a duplicate
// key, …). When it names, by its id, a call the proxy forwarded to this
// process, that call is answered with an error now: the client would
// otherwise wait for an answer that never comes.
func (s *session) onMalformedUpstream(gen uint64, frame []byte, err error) {
	s.log.Warn("malformed message from the server dropped", "err", err.Error())
	var id int64 = -1
	var pe *jsonrpc.ParseError
	if errors.As(err, &pe) && pe.ID != nil {
		if n, err := strconv.ParseInt(string(bytes.TrimSpace(pe.ID)), 10, 64); err == nil {
			id = n
		}
	}
	if id < 0 {
		id = frameID(frame[:min(len(frame), 256)], frame[max(0, len(frame)-256):])
	}
	c, ok := s.pend.takeUp(id, gen)
	if !ok {
		return
	}
	if c.internal != nil {
		c.internal <- nil
		return
	}
	s.finish(c.req, errorFrame(c.req.id, jsonrpc.CodeInternalError, "mcpwarden: the server's answer was not valid JSON-RPC and was dropped"), "")
}

// frameID is the id read from a frame's anchored head or tail (the
// TypeScript SDK writes it last), or -1.
func frameID(head, tail []byte) int64 {
	headID, tailID := idPatterns()
	for _, re := range []*regexp.Regexp{headID, tailID} {
		src := head
		if re == tailID {
			src = tail
		}
		if mm := re.FindSubmatch(src); mm != nil {
			if n, err := strconv.ParseInt(string(mm[1]), 10, 64); err == nil {
				return n
			}
		}
	}
	return -1
}

func (s *session) onOversizedUpstream(gen uint64, head, tail []byte) {
	id := frameID(head, tail)
	c, ok := s.pend.takeUp(id, gen)
	if !ok {
		s.log.Warn("oversized message from the server dropped", "limit", s.cfg.MaxMessageBytes)
		return
	}
	if c.internal != nil {
		c.internal <- nil
		return
	}
	s.answerTooLarge(c.req)
}

func (s *session) onUpstreamResponse(gen uint64, m *jsonrpc.Message, size int) {
	id, err := strconv.ParseInt(string(bytes.TrimSpace(m.ID)), 10, 64)
	var c *upCall
	ok := false
	if err == nil {
		c, ok = s.pend.takeUp(id, gen)
	}
	if !ok {
		// A forged, duplicated or stale id: it never reaches the client.
		s.log.Warn("server response with an unknown id dropped")
		return
	}
	if c.internal != nil {
		c.internal <- m
		return
	}
	s.pend.noteTask(gen, c.req, m)
	s.onCallAnswered(c.req, m, size)
}

// onUpstreamRequest answers or relays a request of server process gen; w
// writes to that process (an old one may still ask while it is replaced,
// and must get an answer, or it lingers on its request timeout).
func (s *session) onUpstreamRequest(gen uint64, w *jsonrpc.Writer, m *jsonrpc.Message) {
	s.upst.mu.Lock()
	current := gen == s.upst.gen
	s.upst.mu.Unlock()
	if !current && m.Method != "roots/list" {
		s.toServer(w, jsonrpc.ErrorResponse(m.ID, jsonrpc.CodeInternalError, "the server is being replaced", nil))
		return
	}
	if h := s.tab.serverRequests[m.Method]; h != nil {
		h(s, gen, w, m)
		return
	}
	s.toServer(w, jsonrpc.ErrorResponse(m.ID, jsonrpc.CodeMethodNotFound, "method not available through mcpwarden", nil))
	s.recordServerRefusal(s.protocolDenial(m.Method, "", "", schema.ErrMethodNotAllowed)) // bounded (refusals.go)
}

// answerServerRoots answers the server's roots/list from the effective
// scope: client roots never reach the server.
func (s *session) answerServerRoots(gen uint64, w *jsonrpc.Writer, m *jsonrpc.Message) {
	res := s.scope.current().rootsList
	s.upst.mu.Lock()
	s.upst.rootsUser = true
	s.upst.rootsKnown = true
	if gen == s.upst.gen {
		select {
		case <-s.upst.askedRoots:
		default:
			close(s.upst.askedRoots)
		}
	}
	s.upst.mu.Unlock()
	s.toServer(w, jsonrpc.Result(m.ID, res))
}

// relayServerRequest passes elicitation/create and sampling/createMessage
// to the client when it declared the capability; else -32601. During a
// modern client's call they become an input_required round (mrtr.go).
func (s *session) relayServerRequest(gen uint64, w *jsonrpc.Writer, m *jsonrpc.Message) {
	paths, d := s.checkServerRequest(m)
	if d != nil {
		s.toServer(w, jsonrpc.ErrorResponse(m.ID, jsonrpc.CodeDenied, "mcpwarden: "+string(d.Code)+": "+d.Reason, map[string]string{"error_code": string(d.Code)}))
		s.recordServerRequest(m.Method, paths, d.Code)
		return
	}
	m.Params = s.dropIcons(m.Method, m.Params)
	if m.Method == "sampling/createMessage" {
		if narrowed, ok := narrowSamplingContext(m.Params); ok {
			s.log.Warn("a sampling request's includeContext allServers narrowed to thisServer")
			m.Params = narrowed
		}
	}
	if s.askModernClient(gen, w, m) {
		return // a modern client's call: an input_required round (mrtr.go), recorded with the call
	}
	_, elicit, sample := s.client.declared()
	allowed := (m.Method == "elicitation/create" && elicit) || (m.Method == "sampling/createMessage" && sample)
	if !allowed {
		s.toServer(w, jsonrpc.ErrorResponse(m.ID, jsonrpc.CodeMethodNotFound, "the client did not declare this capability", nil))
		s.recordServerRequest(m.Method, nil, schema.ErrMethodNotAllowed)
		return
	}
	id := s.newID()
	if !s.pend.addRelay(id, &cliCall{relayID: m.ID, relayGen: gen, relayMethod: m.Method}) {
		// A server that floods the client with requests it does not answer
		// would grow the table without end.
		s.toServer(w, jsonrpc.ErrorResponse(m.ID, jsonrpc.CodeInternalError, "mcpwarden: more than "+strconv.Itoa(maxRelayed)+" requests to the client unanswered; wait for answers", nil))
		s.recordServerRequest(m.Method, paths, schema.ErrMalformedRequest)
		return
	}
	s.recordServerRequest(m.Method, paths, "")
	s.toClient(jsonrpc.Forward(m, jsonrpc.IntID(id)))
}

// narrowSamplingContext turns a sampling request's includeContext
// "allServers" into "thisServer": "allServers" asks the client to put the
// context of its other MCP servers (their tools' results, their files)
// into the prompt whose answer goes back to this server, which the run's
// scope does not give it. The spec lets a client ignore the field; the
// proxy keeps the part that is the server's own.
//
// The member is found in any case, and its value too (round twelve): a
// client that decodes with encoding/json (go-sdk's inputRequests) reads
// "IncludeContext" as includeContext.
func narrowSamplingContext(params json.RawMessage) (json.RawMessage, bool) {
	if !mayHoldFold(params, "allServers") {
		return nil, false
	}
	var p map[string]json.RawMessage
	if strictjson.Unmarshal(params, &p) != nil {
		return nil, false
	}
	for k, v := range p {
		var ctx string
		if !strings.EqualFold(k, "includeContext") || strictjson.Unmarshal(v, &ctx) != nil || !strings.EqualFold(ctx, "allServers") {
			continue
		}
		delete(p, k)
		p["includeContext"] = json.RawMessage(`"thisServer"`)
		return mustJSON(p), true
	}
	return nil, false
}

// mayHoldFold is mayHold for lit in any ASCII case.
func mayHoldFold(raw []byte, lit string) bool {
	return policy.ContainsFold(raw, lit) || policy.HasEscapedASCII(raw, strings.ToLower(lit)+strings.ToUpper(lit))
}

// checkServerRequest checks what a server asks of the client (sampling
// messages, an elicitation): a file:// URI in it — an embedded resource
// or a link — must be inside the effective scope and not secret, as in
// a tool's result.
func (s *session) checkServerRequest(m *jsonrpc.Message) ([]string, *policy.Denial) {
	return s.pol.CheckResultURIs(m.Params, s.scope.current().paths)
}

// recordServerRequest records a server→client request the proxy relayed
// (code "") or refused: the client, and its model, are asked something;
// and a server notification refused for the file URI it carries.
func (s *session) recordServerRequest(method string, paths []string, code schema.ErrorCode) {
	now := s.cfg.Now()
	d := schema.Decision{
		OpID: schema.NewID(), Method: recordLabel(method), ServerOrigin: s.serverOrigin(), ActionClass: schema.ActionNone,
		Decision: schema.OutcomeAllow, Approval: schema.ApprovalNotRequired, StartNS: now.UnixNano(), EndNS: now.UnixNano(),
	}
	s.client.mu.Lock()
	d.ProtocolEra, d.ProtocolVersion = eraLegacy, recordLabel(s.client.version)
	s.client.mu.Unlock()
	if code != "" {
		d.Decision, d.ErrorCode = schema.OutcomeDeny, string(code)
	}
	for _, p := range paths {
		d.PathHashes = append(d.PathHashes, s.cfg.Hasher.Hash(p))
	}
	if code != "" {
		s.recordServerRefusal(d) // a server can send refusals without end (refusals.go)
		return
	}
	s.rec.add(d)
}

// metaSubscriptionID tags a modern notification with the id of the
// subscriptions/listen request it belongs to.
const metaSubscriptionID = "io.modelcontextprotocol/subscriptionId"

func (s *session) onUpstreamNotification(gen uint64, m *jsonrpc.Message) {
	if m.Method == "notifications/cancelled" {
		s.forwardServerCancel(gen, m)
		return
	}
	if !s.tab.serverNotifications[m.Method] {
		s.log.Info("server notification dropped", "method", recordLabel(truncate(m.Method, 64)))
		return
	}
	if m.Method == "notifications/progress" && !s.pend.progressLive(gen, m) {
		// Progress may only name a request in flight that asked for it
		// (the token of its _meta): a server must not report on, or
		// spoof, another request's progress.
		s.log.Info("server progress for no request in flight dropped")
		return
	}
	if paths, d := s.pol.CheckResultURIs(m.Params, s.scope.current().paths); d != nil {
		// A log message, progress or resources/updated carrying a file
		// URI the scope does not allow (an embedded resource in a log's
		// data): the same check as an answer's. Recorded like a refused
		// server request (bounded: refusals.go).
		s.log.Warn("server notification refused: it holds a file URI the scope does not allow", "method", recordLabel(truncate(m.Method, 64)), "error_code", string(d.Code))
		s.recordServerRequest(m.Method, paths, d.Code)
		return
	}
	m.Params = s.dropIcons(m.Method, m.Params)
	switch m.Method {
	case "notifications/tasks/status":
		s.pend.endTask(m)
	case "notifications/tasks":
		// A task of the 2026-07-28 era: its result inline, as tasks/get
		// carries it, under the same cap.
		if len(m.Params) > s.cfg.MaxResponseBytes {
			s.log.Warn("server notification refused: a task's result larger than this run's cap", "method", m.Method)
			s.recordServerRequest(m.Method, nil, schema.ErrResponseTooLarge)
			return
		}
		m.Params = narrowInputRequests(m.Params)
		s.pend.endTask(m)
	}
	frame, ok := s.clientNotification(gen, m)
	if !ok {
		s.log.Info("server notification for an unknown subscription dropped", "method", recordLabel(truncate(m.Method, 64)))
		return
	}
	s.toClient(frame)
}

// forwardServerCancel passes a server's cancellation of a request it
// sent the client (a sampling or elicitation the proxy relayed) with the
// id the client knows it by; the relayed request is forgotten, so a late
// answer goes nowhere. A cancellation naming anything else — a client's
// request, a request of an earlier process, an id never relayed — is
// dropped: a server cannot cancel what the client asked.
func (s *session) forwardServerCancel(gen uint64, m *jsonrpc.Message) {
	var p map[string]json.RawMessage
	if strictjson.Unmarshal(m.Params, &p) != nil || p["requestId"] == nil {
		s.log.Info("server cancellation without a request id dropped")
		return
	}
	id, ok := s.pend.takeRelay(gen, p["requestId"])
	if !ok {
		s.log.Info("server cancellation of no request it sent dropped")
		return
	}
	params := map[string]json.RawMessage{"requestId": jsonrpc.IntID(id)}
	if r, ok := p["reason"]; ok {
		params["reason"] = r
	}
	s.toClient(jsonrpc.Request(nil, "notifications/cancelled", params))
}

// clientNotification is m as the client must see it: a notification that
// names the subscriptions/listen request it belongs to names the client's
// id of that request, never the proxy's; one naming no listen request of
// this server process is dropped (false).
func (s *session) clientNotification(gen uint64, m *jsonrpc.Message) ([]byte, bool) {
	if !mayHold(m.Params, metaSubscriptionID) {
		return jsonrpc.Forward(m, nil), true
	}
	var params map[string]json.RawMessage
	var meta map[string]json.RawMessage
	if strictjson.Unmarshal(m.Params, &params) != nil || strictjson.Unmarshal(params["_meta"], &meta) != nil {
		return nil, false
	}
	raw, ok := meta[metaSubscriptionID]
	if !ok {
		return jsonrpc.Forward(m, nil), true
	}
	id, err := strconv.ParseInt(string(bytes.TrimSpace(raw)), 10, 64)
	if err != nil {
		return nil, false
	}
	rq := s.pend.listenRequest(id, gen)
	if rq == nil {
		return nil, false
	}
	meta[metaSubscriptionID] = rq.id
	params["_meta"] = mustJSON(meta)
	return jsonrpc.Request(nil, m.Method, params), true
}

// mayHold is a quick test that raw (JSON) may hold the string lit: it
// holds it as written, or holds a \u escape of one of its characters (a
// reader sees "all\u0053ervers" as "allServers"). When it reports false,
// no decoded string or member name of raw is lit.
func mayHold(raw []byte, lit string) bool {
	return bytes.Contains(raw, []byte(lit)) || policy.HasEscapedASCII(raw, lit)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
