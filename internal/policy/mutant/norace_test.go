//go:build !race

package mutant

const raceEnabled = false
