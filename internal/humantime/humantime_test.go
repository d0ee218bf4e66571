package humantime

import (
	"testing"
	"time"
)

func TestFormat(t *testing.T) {
	at := time.Date(2026, 11, 26, 10, 45, 32, 999, time.FixedZone("CET", 3600))
	old := time.Local
	time.Local = time.UTC
	defer func() { time.Local = old }()
	if got := Format(at); got != "2026-11-26 09:45:32 UTC" {
		t.Errorf("Format = %q", got)
	}
	if got := Format(time.Time{}); got != "-" {
		t.Errorf("the zero time is %q", got)
	}
}
