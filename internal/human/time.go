// Package human is how toolbus shows values to a person, the same in
// every table, terminal view and message: a moment in one layout (Time),
// a JSON value as a person would write it (JSON). Output for programs
// (--json) keeps its own forms: RFC 3339 times, the JSON as recorded.
package human

import "time"

// TimeLayout is the date, the time to the second and the zone's name:
// "2026-11-26 10:45:32 UTC". A reader across zones, or reading a day
// later, needs both the date and the zone.
const TimeLayout = "2006-01-02 15:04:05 MST"

// Time is t in the local zone in TimeLayout, shown in every zone the
// same way; the zero time is "-".
func Time(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format(TimeLayout)
}
