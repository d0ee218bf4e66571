//go:build !linux

package proctree

import (
	"sync"

	"github.com/toolbus/toolbus/internal/sandbox"
)

// Starter starts trees; without a supervisor there is nothing to start
// ahead. Its zero value is ready for use. Safe for concurrent use.
type Starter struct {
	// Sandbox is ignored: elsewhere than Linux there is no Landlock.
	Sandbox *sandbox.Sandbox

	mu     sync.Mutex
	closed bool
}

// Start starts c, as Start does.
func (s *Starter) Start(c Command) (*Tree, error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	return Start(c)
}

// Close makes later Starts fail.
func (s *Starter) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}
