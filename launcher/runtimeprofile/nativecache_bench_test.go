package runtimeprofile

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/mcpwarden/mcpwarden/internal/testenv"
)

// BenchmarkNodeServerProfile resolves the runtime profile of the pinned npm
// filesystem server (node, its node_modules tree of a few thousand entries)
// with a fresh walk of the tree for native code, and from the cache. The
// difference is what a launch of an npm server saves once its tree was
// walked (make bench; docs/benchmarks-launcher.md).
func BenchmarkNodeServerProfile(b *testing.B) {
	testenv.RequireCommand(b, "node")
	script := filepath.Join(testenv.RepoRoot(), "deploy", "mcp-servers", "node_modules", "@modelcontextprotocol", "server-filesystem", "dist", "index.js")
	testenv.RequireFile(b, script, "run scripts/test-env.sh install-npm")
	cache := filepath.Join(b.TempDir(), "cache")
	for _, c := range []struct{ name, cache string }{{"walk", ""}, {"cached", cache}} {
		b.Run(c.name, func(b *testing.B) {
			opt := Options{PATH: os.Getenv("PATH"), Dir: filepath.Dir(script), NativeCache: c.cache}
			if _, err := Resolve([]string{"node", script}, opt); err != nil {
				b.Fatal(err)
			}
			if c.cache != "" && len(cacheFiles(nil, c.cache)) != 2 { // node's libraries and the tree's walk
				b.Fatal("the walk was not cached")
			}
			for b.Loop() {
				if _, err := Resolve([]string{"node", script}, opt); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
