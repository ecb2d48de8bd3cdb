//lint:file-ignore SA1019 roots, sampling and logging are deprecated in 2026-07-28 (SEP-2577), and still what real clients use: the proxy must carry them, so the test uses them.

package interop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	gojsonrpc "github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// goSDKClient is go-sdk v1.8.0's client with handlers for everything a
// server may ask of it: sampling answers a fixed text, elicitation
// declines. rootsDir, when set, is its one root; otherwise it keeps
// go-sdk's default: roots declared, none listed.
func goSDKClient(rootsDir string) *mcp.Client {
	c := mcp.NewClient(&mcp.Implementation{Name: "interop-go-sdk", Version: "1.8.0"}, &mcp.ClientOptions{
		CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			return &mcp.CreateMessageResult{Model: "interop-model", Role: "assistant", Content: &mcp.TextContent{Text: "hi from the client"}}, nil
		},
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "decline"}, nil
		},
		LoggingMessageHandler:  func(context.Context, *mcp.LoggingMessageRequest) {},
		ResourceUpdatedHandler: func(context.Context, *mcp.ResourceUpdatedNotificationRequest) {},
	})
	if rootsDir != "" {
		c.AddRoots(&mcp.Root{URI: "file://" + rootsDir, Name: "work"})
	}
	return c
}

// runGoSDK connects go-sdk's client to argv over stdio in protocol era
// (go-sdk's auto mode for 2026-07-28: server/discover, else initialize)
// and runs ops; it returns what the client saw for each.
func runGoSDK(t *testing.T, argv []string, era, rootsDir string, ops []op) []outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = childEnv(t)
	cs, err := goSDKClient(rootsDir).Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}, &mcp.ClientSessionOptions{ProtocolVersion: era})
	if err != nil {
		t.Fatalf("go-sdk connect (%s) to %v: %v", era, argv, err)
	}
	defer cs.Close()
	out := []outcome{{Op: "connect", Result: mustJSON(t, cs.InitializeResult())}}
	if rootsDir != "" {
		awaitRoots(ctx, t, cs, rootsDir)
	}
	for _, o := range inEra(ops, era) {
		res, err := goSDKDo(ctx, cs, o)
		oc := outcome{Op: o.Name}
		if err != nil {
			var we *gojsonrpc.Error
			if errors.As(err, &we) {
				oc.Error = &opError{Code: int(we.Code), Message: we.Message}
			} else {
				oc.Error = &opError{Message: err.Error()}
			}
		} else {
			oc.Result = mustJSON(t, res)
		}
		out = append(out, oc)
	}
	return out
}

// goSDKDo sends o through go-sdk's typed API.
func goSDKDo(ctx context.Context, cs *mcp.ClientSession, o op) (any, error) {
	raw, _ := json.Marshal(o.Params)
	decode := func(p any) error {
		if o.Params == nil {
			return nil
		}
		return json.Unmarshal(raw, p)
	}
	switch o.Method {
	case "tools/list":
		return cs.ListTools(ctx, nil)
	case "tools/call":
		var p mcp.CallToolParams
		if err := decode(&p); err != nil {
			return nil, err
		}
		return cs.CallTool(ctx, &p)
	case "resources/list":
		return cs.ListResources(ctx, nil)
	case "resources/templates/list":
		return cs.ListResourceTemplates(ctx, nil)
	case "resources/read":
		var p mcp.ReadResourceParams
		if err := decode(&p); err != nil {
			return nil, err
		}
		return cs.ReadResource(ctx, &p)
	case "prompts/list":
		return cs.ListPrompts(ctx, nil)
	case "prompts/get":
		var p mcp.GetPromptParams
		if err := decode(&p); err != nil {
			return nil, err
		}
		return cs.GetPrompt(ctx, &p)
	case "completion/complete":
		var p mcp.CompleteParams
		if err := decode(&p); err != nil {
			return nil, err
		}
		return cs.Complete(ctx, &p)
	case "logging/setLevel":
		var p mcp.SetLoggingLevelParams
		if err := decode(&p); err != nil {
			return nil, err
		}
		return "ok", cs.SetLoggingLevel(ctx, &p)
	case "resources/subscribe":
		var p mcp.SubscribeParams
		if err := decode(&p); err != nil {
			return nil, err
		}
		return "ok", cs.Subscribe(ctx, &p)
	case "resources/unsubscribe":
		var p mcp.UnsubscribeParams
		if err := decode(&p); err != nil {
			return nil, err
		}
		return "ok", cs.Unsubscribe(ctx, &p)
	}
	return nil, fmt.Errorf("no go-sdk call for %s", o.Method)
}

// awaitRoots waits (bounded) until a filesystem server lists rootsDir, the
// client's root: the server asks for roots after initialized, and a call
// before its answer runs against its old list (MCP.md), direct and wrapped
// alike. Servers without the tool are not waited for.
func awaitRoots(ctx context.Context, t *testing.T, cs *mcp.ClientSession, rootsDir string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "list_allowed_directories", Arguments: map[string]any{}})
		if err != nil || res.IsError {
			return // not a filesystem server
		}
		if b, _ := json.Marshal(res.Content); strings.Contains(string(b), rootsDir) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the server never listed the client's root %s", rootsDir)
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestGoSDKClient runs go-sdk v1.8.0's client against every server direct
// and wrapped, in both eras, and compares what it saw.
func TestGoSDKClient(t *testing.T) {
	w := newWorld(t)
	var ta tally
	t.Run("servers", func(t *testing.T) {
		for _, s := range []server{w.goSDKServer(), w.everythingServer(), w.filesystemServer(false), w.filesystemServer(true)} {
			for _, era := range eras {
				t.Run(s.name+"/"+era, func(t *testing.T) {
					t.Parallel()
					rootsDir := ""
					if s.roots || s.name == "server-everything" {
						rootsDir = w.work
					}
					ops := forClient(opsFor(w, s), "go-sdk")
					direct := runGoSDK(t, s.argv, era, rootsDir, ops)
					wrapped := runGoSDK(t, w.wrap(s), era, rootsDir, ops)
					all := inEra(append([]op{{Name: "connect"}}, ops...), era)
					prefix := "go-sdk/" + s.name + "/" + era
					m, d := compareOutcomes(t, prefix, all, direct, wrapped, era == eraModern && !s.modern)
					ta.add(prefix, m, d, len(all))
				})
			}
		}
	})
	ta.report(t, "go-sdk v1.8.0")
}
