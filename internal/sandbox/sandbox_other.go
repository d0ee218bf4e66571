//go:build !linux

package sandbox

import "fmt"

// ABI is the kernel's Landlock ABI version: elsewhere than Linux there is
// none.
func ABI() (int, error) { return 0, fmt.Errorf("%w: not Linux", ErrUnavailable) }

// Ruleset is a Policy made into a Landlock ruleset: elsewhere than Linux
// there is none.
type Ruleset struct{}

// Fd is the ruleset's file descriptor: none.
func (r *Ruleset) Fd() int { return -1 }

// Flags are what RestrictThread is to be given with Fd: none.
func (r *Ruleset) Flags() uint32 { return 0 }

// Close does nothing.
func (r *Ruleset) Close() error { return nil }

// Ruleset returns an error wrapping ErrUnavailable: elsewhere than Linux
// nothing is confined.
func (s *Sandbox) Ruleset() (*Ruleset, error) {
	_, err := ABI()
	return nil, err
}

// Close does nothing.
func (s *Sandbox) Close() error { return nil }

type cache struct{}

// RestrictThread returns an error wrapping ErrUnavailable.
func RestrictThread(fd int, flags uint32) error {
	_, err := ABI()
	return err
}
