package interop

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// runTSClient runs deploy/interop/clients/sdk-client.mjs (the TypeScript
// SDK sdk, "v1" or "v2") against argv in protocol era and returns what it
// saw for each op, connect first.
func runTSClient(t *testing.T, sdk string, argv []string, era, rootsDir string, ops []op) []outcome {
	t.Helper()
	spec, err := json.Marshal(map[string]any{"sdk": sdk, "era": era, "command": argv, "rootsDir": rootsDir, "ops": inEra(ops, era)})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	specFile := filepath.Join(dir, "spec.json")
	if err := os.WriteFile(specFile, spec, 0o600); err != nil {
		t.Fatal(err)
	}
	script := interopFile(t, "clients", "sdk-client.mjs")
	stdout, err := runNode(context.Background(), t, dir, script, specFile)
	if err != nil {
		t.Fatalf("TypeScript SDK %s client against %v: %v", sdk, argv, err)
	}
	var out []outcome
	if err := json.Unmarshal(stdout, &out); err != nil {
		t.Fatalf("TypeScript SDK %s client printed %q: %v", sdk, stdout, err)
	}
	if len(out) > 0 && out[0].Op == "connect" && out[0].Error != nil {
		t.Fatalf("TypeScript SDK %s client could not connect (%s) to %v: %s", sdk, era, argv, out[0].Error.Message)
	}
	return out
}

// tsSDKs are the TypeScript SDK clients and the eras each speaks: v1
// (@modelcontextprotocol/sdk 1.32.2) only the legacy one, v2
// (@modelcontextprotocol/client 2.4.0) both (2026-07-28 in its "auto"
// mode, which falls back to initialize for a legacy-only server).
var tsSDKs = []struct {
	name string
	eras []string
}{
	{"v1", []string{eraLegacy}},
	{"v2", eras},
}

// TestTSSDKClient runs the TypeScript SDK clients against every server
// direct and wrapped, in every era they speak, and compares what they saw:
// the same operations as TestGoSDKClient.
func TestTSSDKClient(t *testing.T) {
	w := newWorld(t)
	tallies := map[string]*tally{}
	t.Run("servers", func(t *testing.T) {
		for _, sdk := range tsSDKs {
			ta := &tally{}
			tallies[sdk.name] = ta
			for _, s := range []server{w.goSDKServer(), w.everythingServer(), w.filesystemServer(false), w.filesystemServer(true)} {
				for _, era := range sdk.eras {
					t.Run(sdk.name+"/"+s.name+"/"+era, func(t *testing.T) {
						t.Parallel()
						rootsDir := ""
						if s.roots || s.name == "server-everything" {
							rootsDir = w.work
						}
						ops := forClient(opsFor(w, s), "ts-"+sdk.name)
						direct := runTSClient(t, sdk.name, s.argv, era, rootsDir, ops)
						wrapped := runTSClient(t, sdk.name, w.wrap(s), era, rootsDir, ops)
						all := inEra(append([]op{{Name: "connect"}}, ops...), era)
						prefix := "ts-" + sdk.name + "/" + s.name + "/" + era
						m, d := compareOutcomes(t, prefix, all, direct, wrapped, era == eraModern && !s.modern)
						ta.add(prefix, m, d, len(all))
					})
				}
			}
		}
	})
	for _, sdk := range tsSDKs {
		tallies[sdk.name].report(t, "TypeScript SDK "+sdk.name)
	}
}
