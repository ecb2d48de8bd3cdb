// Package probe starts an MCP server over stdio and asks it what it is:
// initialize, tools/list (every page), prompts/list, then an optional
// scripted session of JSON-RPC requests. mcpwarden wrap and profile learn
// run the server this way under `mcpwarden run`, so what they learn is what
// the server does under the fence.
//
// The server is not trusted: lines are bounded, answers are matched by id,
// requests from the server are answered (roots/list with the roots given,
// ping, everything else -32601), and nothing it says is executed.
package probe

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ProtocolVersion is what the probe asks for in initialize.
const ProtocolVersion = "2025-06-18"

// Limits on what a server may send.
const (
	MaxLineBytes = 16 << 20
	MaxPages     = 64
	MaxTools     = 4096
)

// Config is one probe.
type Config struct {
	Argv  []string // the command to start (e.g. mcpwarden run ... -- server)
	Env   []string // its whole environment
	Dir   string   // its working directory
	Roots []string // absolute directories answered to roots/list
	// Timeout bounds each request's answer (initialize included); default 30 s.
	Timeout time.Duration
	// Script are requests sent after tools/list, in order (see ParseScript).
	Script []Request
	// Stderr receives the server's stderr (besides the tail kept in Result).
	Stderr io.Writer
}

// Request is one scripted JSON-RPC request (or notification).
type Request struct {
	Method       string          `json:"method"`
	Params       json.RawMessage `json:"params,omitempty"`
	Notification bool            `json:"-"`
}

// Annotations are a tool's hints (untrusted: the server says so).
type Annotations struct {
	Title           string `json:"title,omitempty"`
	ReadOnlyHint    *bool  `json:"readOnlyHint,omitempty"`
	DestructiveHint *bool  `json:"destructiveHint,omitempty"`
	IdempotentHint  *bool  `json:"idempotentHint,omitempty"`
	OpenWorldHint   *bool  `json:"openWorldHint,omitempty"`
}

// Tool is one tool as tools/list described it.
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Annotations *Annotations    `json:"annotations,omitempty"`
	InputSchema json.RawMessage `json:"inputSchema,omitempty"`
}

// Properties lists the top-level argument names of the tool's input
// schema with their description, in schema order where it is an object.
func (t Tool) Properties() []Property {
	var s struct {
		Properties json.RawMessage `json:"properties"`
	}
	if json.Unmarshal(t.InputSchema, &s) != nil || len(s.Properties) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(s.Properties))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	var out []Property
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return out
		}
		name, _ := tok.(string)
		var p struct {
			Type        any    `json:"type"`
			Description string `json:"description"`
			Format      string `json:"format"`
		}
		if dec.Decode(&p) != nil {
			return out
		}
		typ, _ := p.Type.(string)
		out = append(out, Property{Name: name, Type: typ, Description: p.Description, Format: p.Format})
	}
	return out
}

// Property is one argument of a tool's input schema.
type Property struct {
	Name, Type, Description, Format string
}

// ScriptResult is the answer to one scripted request.
type ScriptResult struct {
	Method string `json:"method"`
	OK     bool   `json:"ok"`
	Error  string `json:"error,omitempty"` // the JSON-RPC error's message, or why there was no answer
}

// Result is what the server said.
type Result struct {
	ServerName      string         `json:"server_name,omitempty"`
	ServerVersion   string         `json:"server_version,omitempty"`
	ProtocolVersion string         `json:"protocol_version,omitempty"`
	Tools           []Tool         `json:"tools"`
	Prompts         []string       `json:"prompts,omitempty"`
	Script          []ScriptResult `json:"script,omitempty"`
	// ExitCode is the process's exit status (-1 while it ran, 128+N for a
	// signal); StderrTail the last lines it wrote to stderr.
	ExitCode   int    `json:"exit_code"`
	StderrTail string `json:"stderr_tail,omitempty"`
}

// Error is a probe that failed: the process ended or did not answer.
type Error struct {
	Step       string // "start", "initialize", "tools/list"
	Err        error
	ExitCode   int
	StderrTail string
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("%s: %v", e.Step, e.Err)
	if e.ExitCode >= 0 {
		msg += fmt.Sprintf(" (exit status %d)", e.ExitCode)
	}
	if e.StderrTail != "" {
		msg += "; its stderr ended with:\n" + e.StderrTail
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// message is any JSON-RPC message from the server.
type message struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// Run probes a server and stops it.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if len(cfg.Argv) == 0 {
		return nil, errors.New("probe: no command")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	cmd := exec.Command(cfg.Argv[0], cfg.Argv[1:]...)
	cmd.Env, cmd.Dir = cfg.Env, cfg.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	tail := &tailBuffer{max: 8 << 10}
	if cfg.Stderr != nil {
		cmd.Stderr = io.MultiWriter(tail, cfg.Stderr)
	} else {
		cmd.Stderr = tail
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, &Error{Step: "start", Err: err, ExitCode: -1}
	}
	s := &session{cfg: cfg, in: stdin, msgs: make(chan message, 64), done: make(chan struct{}), quit: make(chan struct{})}
	defer close(s.quit)
	go s.read(stdout)
	exited := make(chan struct{})
	var state *exec.ExitError
	go func() {
		werr := cmd.Wait()
		errors.As(werr, &state)
		close(exited)
	}()
	stop := func() int {
		stdin.Close()
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(5 * time.Second):
				syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				<-exited
			}
		}
		if state != nil {
			if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				return 128 + int(ws.Signal())
			}
			return state.ExitCode()
		}
		return 0
	}
	res, perr := s.run(ctx)
	code := stop()
	if perr != nil {
		var pe *Error
		if errors.As(perr, &pe) {
			pe.ExitCode, pe.StderrTail = code, tail.String()
		}
		return nil, perr
	}
	res.ExitCode, res.StderrTail = code, tail.String()
	return res, nil
}

type session struct {
	cfg    Config
	in     io.Writer
	mu     sync.Mutex // serialises writes
	msgs   chan message
	done   chan struct{} // closed when stdout ends
	quit   chan struct{} // closed when the probe is over
	nextID int
	rerr   error
}

func (s *session) read(r io.Reader) {
	defer close(s.done)
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := readLine(br)
		if len(bytes.TrimSpace(line)) > 0 {
			var m message
			if json.Unmarshal(line, &m) == nil {
				select {
				case s.msgs <- m:
				case <-s.quit:
					return
				}
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				s.rerr = err
			}
			return
		}
	}
}

func readLine(br *bufio.Reader) ([]byte, error) {
	var buf []byte
	for {
		chunk, err := br.ReadSlice('\n')
		buf = append(buf, chunk...)
		if len(buf) > MaxLineBytes {
			return nil, fmt.Errorf("the server sent a line longer than %d bytes", MaxLineBytes)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return buf, err
	}
}

func (s *session) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err = s.in.Write(append(b, '\n'))
	return err
}

// call sends a request and waits for its answer, answering the server's
// own requests meanwhile.
func (s *session) call(ctx context.Context, method string, params any) (json.RawMessage, error) {
	s.nextID++
	id := s.nextID
	req := map[string]any{"jsonrpc": "2.0", "id": id, "method": method}
	if params != nil {
		req["params"] = params
	}
	if err := s.send(req); err != nil {
		return nil, fmt.Errorf("send %s: %w (the server's stdin is closed: it exited)", method, err)
	}
	timer := time.NewTimer(s.cfg.Timeout)
	defer timer.Stop()
	want := fmt.Sprint(id)
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-timer.C:
			return nil, fmt.Errorf("no answer to %s within %v", method, s.cfg.Timeout)
		case m := <-s.msgs:
			if m.Method != "" {
				s.answer(m)
				continue
			}
			if string(bytes.TrimSpace(m.ID)) != want {
				continue
			}
			if m.Error != nil {
				return nil, &RPCError{Code: m.Error.Code, Message: m.Error.Message}
			}
			return m.Result, nil
		case <-s.done:
			// Drain what arrived before the end.
			for {
				select {
				case m := <-s.msgs:
					if m.Method == "" && string(bytes.TrimSpace(m.ID)) == want {
						if m.Error != nil {
							return nil, &RPCError{Code: m.Error.Code, Message: m.Error.Message}
						}
						return m.Result, nil
					}
					continue
				default:
				}
				break
			}
			if s.rerr != nil {
				return nil, s.rerr
			}
			return nil, fmt.Errorf("the server closed its stdout before answering %s", method)
		}
	}
}

// RPCError is a JSON-RPC error answer.
type RPCError struct {
	Code    int
	Message string
}

func (e *RPCError) Error() string { return fmt.Sprintf("JSON-RPC error %d: %s", e.Code, e.Message) }

// answer replies to a request from the server; notifications get nothing.
func (s *session) answer(m message) {
	if len(m.ID) == 0 || string(m.ID) == "null" {
		return
	}
	resp := map[string]any{"jsonrpc": "2.0", "id": m.ID}
	switch m.Method {
	case "roots/list":
		roots := []map[string]string{}
		for _, r := range s.cfg.Roots {
			roots = append(roots, map[string]string{"uri": (&url.URL{Scheme: "file", Path: r}).String(), "name": lastElem(r)})
		}
		resp["result"] = map[string]any{"roots": roots}
	case "ping":
		resp["result"] = map[string]any{}
	default:
		resp["error"] = map[string]any{"code": -32601, "message": "the mcpwarden probe does not offer " + m.Method}
	}
	_ = s.send(resp)
}

func lastElem(p string) string {
	p = strings.TrimRight(p, "/")
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}

func (s *session) run(ctx context.Context) (*Result, error) {
	caps := map[string]any{}
	if len(s.cfg.Roots) > 0 {
		caps["roots"] = map[string]any{"listChanged": false}
	}
	raw, err := s.call(ctx, "initialize", map[string]any{
		"protocolVersion": ProtocolVersion,
		"capabilities":    caps,
		"clientInfo":      map[string]any{"name": "mcpwarden-probe", "version": "1"},
	})
	if err != nil {
		return nil, &Error{Step: "initialize", Err: err, ExitCode: -1}
	}
	res := &Result{ExitCode: -1, Tools: []Tool{}}
	var init struct {
		ProtocolVersion string `json:"protocolVersion"`
		ServerInfo      struct {
			Name    string `json:"name"`
			Version string `json:"version"`
		} `json:"serverInfo"`
		Capabilities map[string]json.RawMessage `json:"capabilities"`
	}
	if err := json.Unmarshal(raw, &init); err != nil {
		return nil, &Error{Step: "initialize", Err: fmt.Errorf("malformed answer: %w", err), ExitCode: -1}
	}
	res.ProtocolVersion, res.ServerName, res.ServerVersion = init.ProtocolVersion, init.ServerInfo.Name, init.ServerInfo.Version
	if err := s.send(map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"}); err != nil {
		return nil, &Error{Step: "initialize", Err: err, ExitCode: -1}
	}
	if _, ok := init.Capabilities["tools"]; ok || init.Capabilities == nil {
		if res.Tools, err = s.listTools(ctx); err != nil {
			return nil, &Error{Step: "tools/list", Err: err, ExitCode: -1}
		}
	}
	if _, ok := init.Capabilities["prompts"]; ok {
		if raw, err := s.call(ctx, "prompts/list", map[string]any{}); err == nil {
			var pl struct {
				Prompts []struct {
					Name string `json:"name"`
				} `json:"prompts"`
			}
			if json.Unmarshal(raw, &pl) == nil {
				for _, p := range pl.Prompts {
					res.Prompts = append(res.Prompts, p.Name)
				}
			}
		}
	}
	for _, r := range s.cfg.Script {
		if r.Notification {
			msg := map[string]any{"jsonrpc": "2.0", "method": r.Method}
			if len(r.Params) > 0 {
				msg["params"] = r.Params
			}
			err := s.send(msg)
			res.Script = append(res.Script, ScriptResult{Method: r.Method, OK: err == nil, Error: errString(err)})
			continue
		}
		var params any
		if len(r.Params) > 0 {
			params = r.Params
		}
		raw, err := s.call(ctx, r.Method, params)
		sr := ScriptResult{Method: r.Method, OK: err == nil}
		if err != nil {
			sr.Error = err.Error()
		} else if isToolError(raw) {
			sr.OK, sr.Error = false, "the tool answered isError: true"
		}
		res.Script = append(res.Script, sr)
	}
	return res, nil
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func isToolError(raw json.RawMessage) bool {
	var r struct {
		IsError bool `json:"isError"`
	}
	return json.Unmarshal(raw, &r) == nil && r.IsError
}

func (s *session) listTools(ctx context.Context) ([]Tool, error) {
	tools := []Tool{}
	cursor := ""
	for page := 0; page < MaxPages; page++ {
		params := map[string]any{}
		if cursor != "" {
			params["cursor"] = cursor
		}
		raw, err := s.call(ctx, "tools/list", params)
		if err != nil {
			return nil, err
		}
		var tl struct {
			Tools      []Tool `json:"tools"`
			NextCursor string `json:"nextCursor"`
		}
		if err := json.Unmarshal(raw, &tl); err != nil {
			return nil, fmt.Errorf("malformed tools/list answer: %w", err)
		}
		tools = append(tools, tl.Tools...)
		if len(tools) > MaxTools {
			return nil, fmt.Errorf("the server lists more than %d tools", MaxTools)
		}
		if tl.NextCursor == "" || tl.NextCursor == cursor {
			return tools, nil
		}
		cursor = tl.NextCursor
	}
	return nil, fmt.Errorf("tools/list did not end after %d pages", MaxPages)
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = t.buf[len(t.buf)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.buf))
}

// ParseScript reads a scripted session: one JSON object per line with
// "method" and optional "params" (and optional "jsonrpc" and "id", which
// the probe replaces with its own). A line without "id" whose method
// starts with "notifications/" is sent as a notification. Blank lines and
// lines starting with '#' are skipped.
func ParseScript(data []byte) ([]Request, error) {
	var out []Request
	for i, line := range bytes.Split(data, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		var r struct {
			JSONRPC string          `json:"jsonrpc"`
			ID      json.RawMessage `json:"id"`
			Method  string          `json:"method"`
			Params  json.RawMessage `json:"params"`
		}
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		if dec.More() {
			return nil, fmt.Errorf("line %d: more than one JSON value", i+1)
		}
		if r.Method == "" {
			return nil, fmt.Errorf("line %d: no \"method\"", i+1)
		}
		if len(r.Params) > 0 && r.Params[0] != '{' && r.Params[0] != '[' {
			return nil, fmt.Errorf("line %d: \"params\" must be an object or an array", i+1)
		}
		out = append(out, Request{Method: r.Method, Params: r.Params, Notification: len(r.ID) == 0 && strings.HasPrefix(r.Method, "notifications/")})
	}
	return out, nil
}
