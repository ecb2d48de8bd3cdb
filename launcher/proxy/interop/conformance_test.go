package interop

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// checkResult is how one conformance check ended.
type checkResult struct {
	Status string `json:"status"` // SUCCESS, FAILURE, WARNING, …
	Error  string `json:"errorMessage"`
}

// scenarioDir is "server-<scenario>-<timestamp>", as the suite names its
// output directories.
var scenarioDir = regexp.MustCompile(`^server-(.+)-\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}-\d{3}Z$`)

// runConformance runs the conformance suite's server scenarios of one spec
// revision (every scenario the revision requires, plus the suite's pending
// and extension scenarios for it) against a stdio server behind
// supergateway, and returns each check's outcome by "scenario/check-id".
func runConformance(t *testing.T, argv []string, revision string) map[string]checkResult {
	t.Helper()
	b := startBridge(t, argv)
	out := t.TempDir()
	suite := interopFile(t, "node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js")
	// The suite exits non-zero when any check fails; the checks are compared
	// below. One that did not finish left scenarios out: that is a failure
	// of the run, not a difference.
	ctx, cancel := context.WithTimeoutCause(context.Background(), suiteTimeout, errSuiteTimeout)
	defer cancel()
	stdout, runErr := runNode(ctx, t, out, suite, "server", "--url", b.URL, "--requirements", revision, "-o", out)
	if errors.Is(context.Cause(ctx), errSuiteTimeout) {
		t.Fatalf("the conformance suite (%s) did not finish within %v:\n%s", revision, suiteTimeout, stdout)
	}
	entries, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	results := map[string]checkResult{}
	for _, e := range entries {
		m := scenarioDir.FindStringSubmatch(e.Name())
		if m == nil || !e.IsDir() {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(out, e.Name(), "checks.json"))
		if err != nil {
			t.Fatalf("scenario %s left no checks.json: %v", m[1], err)
		}
		var checks []struct {
			ID string `json:"id"`
			checkResult
		}
		if err := json.Unmarshal(raw, &checks); err != nil {
			t.Fatalf("scenario %s: checks.json: %v", m[1], err)
		}
		seen := map[string]int{}
		for _, c := range checks {
			key := m[1] + "/" + c.ID
			if seen[c.ID]++; seen[c.ID] > 1 {
				key += "#" + strings.Repeat("'", seen[c.ID]-1)
			}
			results[key] = c.checkResult
		}
	}
	if len(results) == 0 {
		t.Fatalf("the conformance suite produced no results (%v):\n%s\nbridge: %s", runErr, stdout, b.stderr.String())
	}
	return results
}

// suiteTimeout bounds one run of the suite (quiet: about a minute; the
// shared machine under load has taken over three).
const suiteTimeout = 8 * time.Minute

var errSuiteTimeout = errors.New("conformance suite timeout")

// Why a check may end differently wrapped than direct.
const (
	notAllowlisted = "the scenario calls a tool the server does not have, so not in the scope's tool_allowlist: " +
		"the proxy denies it with an isError result (TOOL_NOT_ALLOWED), where the server answers -32602"
)

// conformanceDiffs are the checks that end differently wrapped than direct
// on purpose, by "server/revision/scenario/check", and why. An entry whose
// check ends the same both ways fails the test: the list stays true.
var conformanceDiffs = map[string]string{
	"go-sdk-everything/2026-07-28/tasks-capability-negotiation/sep-2663-server-rejects-undeclared-client":       notAllowlisted,
	"go-sdk-everything/2026-07-28/tasks-dispatch-and-envelope/sep-2663-legacy-task-param-ignored":               notAllowlisted,
	"go-sdk-everything/2026-07-28/tasks-dispatch-and-envelope/tasks-immediate-result-shortcut":                  notAllowlisted,
	"go-sdk-everything/2026-07-28/tasks-dispatch-and-envelope/tasks-result-type-complete-on-non-task-responses": notAllowlisted,
	"go-sdk-everything/2026-07-28/tasks-lifecycle/tasks-sync-tool-call":                                         notAllowlisted,
}

// timeBound are checks that wait a fixed time for the server's first
// frames (the suite's own windows, 500 and 600 ms), in a bridge that starts
// the server (and, wrapped, mcpwarden run) for each modern request. Wrapped
// start-up to the first answer takes tens of milliseconds (docs/proxy.md),
// but on a machine under heavy load it can pass the window, and so can the
// server on its own. Such a check may fail on one side only with the suite's
// own "no frames" message; it is then counted apart, neither as matched nor
// as a difference.
var timeBound = map[string]string{
	"server-stateless/sep-2575-server-no-log-without-loglevel":                "failed to yield frame",
	"server-stateless/sep-2575-http-server-no-independent-requests-on-stream": "Failed to receive progressive stream chunk",
}

// TestConformance runs @modelcontextprotocol/conformance against real
// servers direct and wrapped by `mcpwarden run` (default flags, a scope that
// allows every tool and resource the scenarios use), in both spec
// revisions, and requires every check to end the same way both times.
func TestConformance(t *testing.T) {
	w := newWorld(t)
	type target struct {
		srv      server
		revision string
	}
	var targets []target
	for _, era := range eras {
		targets = append(targets, target{w.goSDKServer(), era})
	}
	// server-everything and the filesystem server are legacy only: direct,
	// every 2026-07-28 scenario fails on them (the bridge hands the modern
	// requests to a server that cannot read them), while the proxy
	// translates; the SDK client tests cover that translation.
	targets = append(targets, target{w.everythingServer(), eraLegacy}, target{w.filesystemServer(false), eraLegacy})

	var mu sync.Mutex
	matched, total, late := 0, 0, 0
	t.Run("targets", func(t *testing.T) {
		for _, tg := range targets {
			t.Run(tg.srv.name+"/"+tg.revision, func(t *testing.T) {
				t.Parallel()
				var direct, wrapped map[string]checkResult
				var wg sync.WaitGroup
				wg.Go(func() { direct = runConformance(t, tg.srv.argv, tg.revision) })
				wg.Go(func() { wrapped = runConformance(t, w.wrap(tg.srv), tg.revision) })
				wg.Wait()
				if t.Failed() {
					return
				}
				m, n, l := compareChecks(t, tg.srv.name+"/"+tg.revision, direct, wrapped)
				mu.Lock()
				matched += m
				total += n
				late += l
				mu.Unlock()
			})
		}
	})
	t.Logf("conformance: %d of %d checks end the same direct and wrapped; %d failed on one side only in the suite's fixed window", matched, total, late)
}

// compareChecks reports every check that ends differently direct and
// wrapped (unless listed in conformanceDiffs) and returns matched, total
// and the checks that failed on one side only in the suite's fixed window.
func compareChecks(t *testing.T, prefix string, direct, wrapped map[string]checkResult) (int, int, int) {
	t.Helper()
	keys := map[string]bool{}
	for k := range direct {
		keys[k] = true
	}
	for k := range wrapped {
		keys[k] = true
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	slices.Sort(sorted)
	matched, passed, late := 0, 0, 0
	for _, k := range sorted {
		d, wr := direct[k].Status, wrapped[k].Status
		if d == "SUCCESS" {
			passed++
		}
		why, expected := conformanceDiffs[prefix+"/"+k]
		switch {
		case d == wr && expected:
			matched++
			t.Errorf("%s: now ends the same direct and wrapped (%s); remove it from conformanceDiffs (%s)", k, d, why)
		case d == wr:
			matched++
		case expected:
			t.Logf("%s: direct %q, wrapped %q — on purpose: %s", k, d, wr, why)
		case timeBound[k] != "" && d == "SUCCESS" && strings.Contains(wrapped[k].Error, timeBound[k]):
			late++
			t.Logf("%s: failed wrapped only because the suite's fixed wait ended first (%s); counted apart", k, wrapped[k].Error)
		case timeBound[k] != "" && wr == "SUCCESS" && strings.Contains(direct[k].Error, timeBound[k]):
			// The same window missed by the server on its own (seen at
			// load 15: the direct go-sdk server's first frame came after
			// 500 ms): the machine's load, not a difference.
			late++
			t.Logf("%s: failed direct only because the suite's fixed wait ended first (%s); counted apart", k, direct[k].Error)
		default:
			t.Errorf("%s: direct %q, wrapped %q (%s)", k, orNone(d), orNone(wr), wrapped[k].Error)
		}
	}
	t.Logf("%s: %d of %d checks end the same (%d pass direct, %d late wrapped)", prefix, matched, len(sorted), passed, late)
	return matched, len(sorted), late
}

func orNone(s string) string {
	if s == "" {
		return "(not run)"
	}
	return s
}
