//go:build !linux

package proctree

import "sync"

// Starter starts trees; without a supervisor there is nothing to start
// ahead. Build it with NewStarter or Unconfined, as on Linux; its sandbox
// confines nothing, elsewhere than Linux there is no Landlock. Safe for
// concurrent use.
type Starter struct {
	conf confinement

	mu     sync.Mutex
	closed bool
}

// Start starts c, as Start does.
func (s *Starter) Start(c Command) (*Tree, error) {
	if _, err := s.conf.of(&c); err != nil {
		return nil, err
	}
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
