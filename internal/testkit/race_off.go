//go:build !race

package testkit

// Race says the race detector is on.
const Race = false
