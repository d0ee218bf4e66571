package discovery

import "time"

// ExpireIdle lets the external tests drop idle tools at a time of their
// choosing, as the source does on its own at each IdleExpiry.
func (s *Source) ExpireIdle(now time.Time) { s.expireIdle(now) }
