package proxy

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

// TestMethodTableIsDenyByDefault holds the method table (methods.go) and
// docs/proxy.md ("Methods", "Answers") together: every method the table
// passes or answers is named in the docs, and the server notifications
// that reach the client are exactly the docs' list. What the table does
// not name is refused (TestUnknownMethodsAreRefused,
// TestRedTeamModernMethods).
func TestMethodTableIsDenyByDefault(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "docs", "proxy.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	named := map[string]bool{}
	for _, m := range regexp.MustCompile("`([a-zA-Z/|_]+)`").FindAllStringSubmatch(doc, -1) {
		span := m[1]
		named[span] = true
		if i := strings.LastIndexByte(span, '/'); i >= 0 && strings.Contains(span, "|") {
			for _, alt := range strings.Split(span[i+1:], "|") {
				named[span[:i+1]+alt] = true
			}
		}
	}
	tab := newMethods()
	var keys []string
	for k := range tab.requests {
		keys = append(keys, k)
	}
	for k := range tab.serverRequests {
		keys = append(keys, k)
	}
	for k := range tab.notifications {
		keys = append(keys, strings.TrimPrefix(k, "notifications/"))
	}
	for _, k := range keys {
		if !named[k] {
			t.Errorf("the table passes %q, which docs/proxy.md does not name", k)
		}
	}
	m := regexp.MustCompile("only `notifications/\\{([^}]*)\\}` reach the client").FindStringSubmatch(doc)
	if m == nil {
		t.Fatal("docs/proxy.md lists no server notifications (\"only `notifications/{…}` reach the client\")")
	}
	var listed []string
	for _, n := range strings.FieldsFunc(m[1], func(r rune) bool { return r == ',' || r == ' ' || r == '\n' }) {
		listed = append(listed, "notifications/"+n)
	}
	var passed []string
	for k := range tab.serverNotifications {
		passed = append(passed, k)
	}
	slices.Sort(listed)
	slices.Sort(passed)
	if !slices.Equal(listed, passed) {
		t.Errorf("server notifications: docs list %v, the table passes %v", listed, passed)
	}
}
