package proxy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpwarden/mcpwarden/schema"
)

// The eighth attack round (docs/proxy.md): what round seven left open.

// TestModernTaskRootsNarrow: a client's roots answer carried by a
// tasks/update (2026-07-28 tasks) narrows the proxy's own checks and the
// fence (the server restarts under the narrower one), as an input
// round's roots answer does; it never widens the scope back (no round
// tells its age); a malformed one means no roots. Before: only what the
// server saw was narrowed, a read outside the answered root still passed
// and the fence stayed the whole scope.
func TestModernTaskRootsNarrow(t *testing.T) {
	logPath := t.TempDir() + "/modern-tasks.log"
	f := newFixture(t, fixtureOpts{
		scope: func(s *schema.Scope) {
			s.ToolAllowlist = []string{"task_input"}
			s.ToolClasses = map[string]string{"task_input": "read"}
		},
		upstream: func(t testing.TB) *procUpstream {
			return startScripted(t, modernTasksEnv+"="+logPath, redteamSecret+"="+os.DevNull)
		},
	})
	c := f.client
	meta := func() map[string]any {
		m := modernMeta()
		m["io.modelcontextprotocol/clientCapabilities"] = map[string]any{"roots": map[string]any{}, "extensions": map[string]any{"io.modelcontextprotocol/tasks": map[string]any{}}}
		return m
	}
	allowed := filepath.Join(f.base, "allowed")
	update := func(answer any) {
		t.Helper()
		m := c.call("tools/call", map[string]any{"name": "task_input", "arguments": map[string]any{}, "_meta": meta()})
		var r struct {
			TaskID string `json:"taskId"`
		}
		if m.Error != nil || json.Unmarshal(m.Result, &r) != nil || r.TaskID == "" {
			t.Fatalf("tools/call = %+v %s", m.Error, m.Result)
		}
		if m := c.call("tasks/get", map[string]any{"taskId": r.TaskID, "_meta": meta()}); m.Error != nil || !strings.Contains(string(m.Result), "roots/list") {
			t.Fatalf("tasks/get = %+v %s", m.Error, m.Result)
		}
		if m := c.call("tasks/update", map[string]any{"taskId": r.TaskID, "_meta": meta(), "inputResponses": map[string]any{"r": answer}}); m.Error != nil {
			t.Fatalf("tasks/update = %+v", m.Error)
		}
	}
	denied := func(rel string) bool {
		t.Helper()
		m := c.call("resources/read", map[string]any{"uri": "file://" + filepath.Join(f.base, rel), "_meta": meta()})
		return rpcErrorCode(m) == string(schema.ErrPathOutsideScope)
	}
	if denied("outside/probe.txt") {
		t.Fatal("a read inside the scope was denied before any roots answer")
	}
	// A first empty answer narrows nothing (the client has no roots yet).
	update(map[string]any{"roots": []any{}})
	if denied("outside/probe.txt") || f.up.restartCount() != 0 {
		t.Fatal("an empty first roots answer narrowed the scope")
	}
	// Roots narrow the proxy's checks and the fence; /etc is not added.
	update(rootsAnswer(allowed, "/etc"))
	if !denied("outside/probe.txt") || denied("allowed/probe.txt") || !denied("../../etc/passwd") {
		t.Fatal("a tasks/update roots answer did not narrow the proxy's checks to the root")
	}
	f.up.mu.Lock()
	restarts := f.up.restarts
	f.up.mu.Unlock()
	if len(restarts) == 0 || len(restarts[len(restarts)-1]) != 1 || restarts[len(restarts)-1][0].Path != allowed {
		t.Fatalf("fence restarts = %+v, want the last under %s only", restarts, allowed)
	}
	// A wider answer later never widens the scope back.
	update(rootsAnswer(f.base))
	if !denied("outside/probe.txt") || denied("allowed/probe.txt") {
		t.Fatal("a later, wider tasks/update roots answer widened the scope")
	}
	// A malformed roots answer (a case variant) means no roots.
	update(map[string]any{"Roots": []map[string]string{{"uri": "file://" + allowed}}})
	if !denied("allowed/probe.txt") {
		t.Fatal("a malformed tasks/update roots answer left the scope in effect")
	}
	f.sink.waitDecision(t, func(d schema.Decision) bool {
		return d.Method == "resources/read" && d.Decision == schema.OutcomeDeny && d.ErrorCode == string(schema.ErrPathOutsideScope)
	})
}
