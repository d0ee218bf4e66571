//go:build race

package mutant

// The race detector makes OPA's evaluation several times slower, and the
// check finds no races: scripts/test.sh runs it once more without -race.
const raceEnabled = true
