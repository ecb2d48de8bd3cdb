// Package mcptest drives an MCP server over stdio the way a client does
// (newline-delimited JSON-RPC 2.0): initialize, notifications/initialized,
// tools/list and tools/call. Tests use it on real servers, directly or
// through `mcpwarden run`.
package mcptest

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// ProtocolVersion is what the client asks for in initialize.
const ProtocolVersion = "2025-06-18"

// Client is one stdio session with a server process.
type Client struct {
	Cmd     *exec.Cmd
	stdin   io.WriteCloser
	lines   chan []byte
	timeout time.Duration
	mu      sync.Mutex
	nextID  int
	// roots, when set (SetRoots before Initialize): the client declares
	// the roots capability and answers roots/list with these file URIs.
	roots []string
}

// SetRoots sets the client's roots (absolute paths). Before Initialize it
// makes the client declare the roots capability; after it, the client
// sends notifications/roots/list_changed. The server's roots/list requests
// are answered while a Call waits.
func (c *Client) SetRoots(paths []string) error {
	c.mu.Lock()
	first := c.roots == nil
	c.roots = []string{}
	for _, p := range paths {
		c.roots = append(c.roots, "file://"+p)
	}
	initialized := c.nextID > 0
	c.mu.Unlock()
	if first || !initialized {
		return nil
	}
	return c.Notify("notifications/roots/list_changed")
}

// answer answers a request of the server: roots/list when the client has
// roots, an error otherwise.
func (c *Client) answer(id any, method string) {
	c.mu.Lock()
	roots := c.roots
	c.mu.Unlock()
	if method == "roots/list" && roots != nil {
		list := []map[string]any{}
		for _, r := range roots {
			list = append(list, map[string]any{"uri": r})
		}
		_ = c.send(map[string]any{"jsonrpc": "2.0", "id": id, "result": map[string]any{"roots": list}})
		return
	}
	_ = c.send(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": -32601, "message": "not supported by the test client"}})
}

// Start runs cmd (its Stdin and Stdout must be unset) and returns a client
// on its stdio. Each answer is awaited at most timeout.
func Start(cmd *exec.Cmd, timeout time.Duration) (*Client, error) {
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &Client{Cmd: cmd, stdin: in, lines: make(chan []byte, 64), timeout: timeout}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			c.lines <- append([]byte(nil), sc.Bytes()...)
		}
		close(c.lines)
	}()
	return c, nil
}

// Response is one JSON-RPC answer.
type Response struct {
	ID     any             `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// Call sends a request and waits for its answer, skipping notifications and
// answering requests from the server (roots/list with the client's roots,
// when set; anything else with an error, as a client without those
// capabilities does).
func (c *Client) Call(method string, params any) (*Response, error) {
	c.mu.Lock()
	c.nextID++
	id := c.nextID
	c.mu.Unlock()
	if err := c.send(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params}); err != nil {
		return nil, err
	}
	deadline := time.After(c.timeout)
	for {
		select {
		case line, ok := <-c.lines:
			if !ok {
				return nil, fmt.Errorf("%s: the server closed its output", method)
			}
			var msg struct {
				ID     any    `json:"id"`
				Method string `json:"method"`
			}
			if json.Unmarshal(line, &msg) != nil {
				continue // a log line on stdout
			}
			if msg.Method != "" {
				if msg.ID != nil {
					c.answer(msg.ID, msg.Method)
				}
				continue
			}
			if f, ok := msg.ID.(float64); !ok || int(f) != id {
				continue
			}
			var r Response
			if err := json.Unmarshal(line, &r); err != nil {
				return nil, err
			}
			return &r, nil
		case <-deadline:
			return nil, fmt.Errorf("%s: no answer within %v", method, c.timeout)
		}
	}
}

// Notify sends a notification.
func (c *Client) Notify(method string) error {
	return c.send(map[string]any{"jsonrpc": "2.0", "method": method})
}

func (c *Client) send(msg any) error {
	b, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err = c.stdin.Write(append(b, '\n'))
	return err
}

// Initialize runs the handshake and returns the server's name.
func (c *Client) Initialize() (string, error) {
	caps := map[string]any{}
	c.mu.Lock()
	if c.roots != nil {
		caps["roots"] = map[string]any{"listChanged": true}
	}
	c.mu.Unlock()
	r, err := c.Call("initialize", map[string]any{"protocolVersion": ProtocolVersion, "capabilities": caps, "clientInfo": map[string]any{"name": "mcpwarden-test", "version": "1"}})
	if err != nil {
		return "", err
	}
	if r.Error != nil {
		return "", fmt.Errorf("initialize: %s", r.Error.Message)
	}
	var res struct {
		ServerInfo struct {
			Name string `json:"name"`
		} `json:"serverInfo"`
	}
	if err := json.Unmarshal(r.Result, &res); err != nil {
		return "", fmt.Errorf("initialize result: %w", err)
	}
	return res.ServerInfo.Name, c.Notify("notifications/initialized")
}

// ListTools returns the names of the server's tools.
func (c *Client) ListTools() ([]string, error) {
	r, err := c.Call("tools/list", map[string]any{})
	if err != nil {
		return nil, err
	}
	if r.Error != nil {
		return nil, fmt.Errorf("tools/list: %s", r.Error.Message)
	}
	var res struct {
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(r.Result, &res); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(res.Tools))
	for _, t := range res.Tools {
		names = append(names, t.Name)
	}
	return names, nil
}

// ErrTool is a tool result with isError set, or a JSON-RPC error.
var ErrTool = errors.New("tool error")

// CallTool calls a tool and returns the text of its content.
func (c *Client) CallTool(name string, args map[string]any) (string, error) {
	r, err := c.Call("tools/call", map[string]any{"name": name, "arguments": args})
	if err != nil {
		return "", err
	}
	if r.Error != nil {
		return "", fmt.Errorf("%w: %s: %s", ErrTool, name, r.Error.Message)
	}
	var res struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		IsError bool `json:"isError"`
	}
	if err := json.Unmarshal(r.Result, &res); err != nil {
		return "", err
	}
	var sb strings.Builder
	for _, c := range res.Content {
		sb.WriteString(c.Text)
	}
	if res.IsError {
		return sb.String(), fmt.Errorf("%w: %s: %s", ErrTool, name, sb.String())
	}
	return sb.String(), nil
}

// Close ends stdin and waits for the process (killing it after grace).
func (c *Client) Close(grace time.Duration) error {
	c.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- c.Cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(grace):
		_ = c.Cmd.Process.Kill()
		return <-done
	}
}
