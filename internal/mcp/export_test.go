package mcp

import "time"

// SetRequestStateLife makes the request states f seals from now on
// expire d after they are sealed (a negative d: already expired).
func SetRequestStateLife(f *Facade, d time.Duration) { f.held.life = d }

// MaxClientSessions is how many sessions one client of an HTTP endpoint
// may hold.
const MaxClientSessions = maxClientSessions
