// Package humantime is how toolbus shows a moment to a person: one
// layout everywhere a table, a terminal view or a log line for people
// shows a time, in the reader's own zone, named. JSON output keeps RFC
// 3339 (encoding/json's form of a time.Time) for programs.
package humantime

import "time"

// Layout is the date, the time to the second and the zone's name:
// "2026-11-26 10:45:32 UTC". A reader across zones, or reading a day
// later, needs both the date and the zone.
const Layout = "2006-01-02 15:04:05 MST"

// Format is t in the local zone in Layout; the zero time is "-".
func Format(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format(Layout)
}
