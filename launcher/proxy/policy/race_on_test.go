//go:build race

package policy

// raceSlack: with the race detector more values escape to the heap (three
// more allocations per CheckArguments here), so allocation budgets allow
// that much more under it.
const raceSlack = 4
