//go:build !race

package jsonrpc

// raceEnabled: the race detector drops sync.Pool items at random, so
// budgets that count on a pooled scanner hold only without it.
const raceEnabled = false
