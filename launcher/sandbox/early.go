package sandbox

import "os"

// The helper starts as early as the Go runtime lets it: this init runs
// before the initialisers of most of mcpwarden's dependencies (NATS,
// ClickHouse, ...), which the helper never uses, and never returns.
func init() {
	if IsHelper() {
		os.Exit(Main())
	}
}
