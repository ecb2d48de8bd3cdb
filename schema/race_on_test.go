//go:build race

package schema

// raceEnabled: the race detector drops sync.Pool items at random, so
// allocation budgets that count on a pool are not checked under it.
const raceEnabled = true
