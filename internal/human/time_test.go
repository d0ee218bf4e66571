package human

import (
	"testing"
	"time"
)

func TestTime(t *testing.T) {
	at := time.Date(2026, 11, 26, 10, 45, 32, 999, time.FixedZone("CET", 3600))
	old := time.Local
	time.Local = time.UTC
	defer func() { time.Local = old }()
	if got := Time(at); got != "2026-11-26 09:45:32 UTC" {
		t.Errorf("Time = %q", got)
	}
	if got := Time(time.Time{}); got != "-" {
		t.Errorf("the zero time is %q", got)
	}
}
